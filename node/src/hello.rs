//! The direct hello exchange: when a connection opens, its dialer sends its signed
//! [`NodeHello`](crate::wire::NodeHello) on `/gpuchain/hello/1.0.0` and the listener answers
//! with its own, so the two learn each other's address, roles and blob endpoint at once.
//!
//! Why not gossip: a node that (re)joins used to make every node it reached broadcast its
//! hello again, so one restart cost every node in the mesh a validation of every other
//! node's hello. On sixteen processes sharing two cores that burst held providers'
//! heartbeats back by up to 260 ms, enough to widen the client's adaptive timeout for the
//! next few seconds. Directly, a join costs one exchange per new connection. The hello topic keeps
//! the periodic broadcast (for peers that are not connected) and each node's own first hello.
//!
//! The bytes are the gossip payload unchanged and go through the same validator, with the
//! connection's authenticated peer in place of gossip's signed author.

use std::io;
use std::time::Duration;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use libp2p::StreamProtocol;
use libp2p::request_response::{self, ProtocolSupport};

pub const HELLO_PROTOCOL: StreamProtocol = StreamProtocol::new("/gpuchain/hello/1.0.0");
/// The most bytes read as one hello: an encoded hello with the most blob addresses it may
/// list is under 2 KiB; anything longer is not a hello and is not read to its end.
pub const MAX_HELLO_BYTES: usize = 8 * 1024;
/// Hello streams one connection may have open at once, each way.
const MAX_HELLO_STREAMS: usize = 4;
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

pub type Behaviour = request_response::Behaviour<HelloCodec>;
pub type Event = request_response::Event<Vec<u8>, Vec<u8>>;

pub fn behaviour() -> Behaviour {
    request_response::Behaviour::new(
        [(HELLO_PROTOCOL, ProtocolSupport::Full)],
        request_response::Config::default()
            .with_request_timeout(HELLO_TIMEOUT)
            .with_max_concurrent_streams(MAX_HELLO_STREAMS),
    )
}

/// A hello is the whole stream, request and response alike: the writer closes its side
/// after it, and the reader stops at [`MAX_HELLO_BYTES`].
#[derive(Debug, Clone, Default)]
pub struct HelloCodec;

impl request_response::Codec for HelloCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_bounded(io).await
    }

    async fn read_response<T>(&mut self, _: &StreamProtocol, io: &mut T) -> io::Result<Vec<u8>>
    where
        T: AsyncRead + Unpin + Send,
    {
        read_bounded(io).await
    }

    async fn write_request<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        io.write_all(&req).await
    }

    async fn write_response<T>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        io.write_all(&res).await
    }
}

async fn read_bounded<T: AsyncRead + Unpin>(io: &mut T) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    io.take(MAX_HELLO_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .await?;
    if buf.len() > MAX_HELLO_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a hello of more than {MAX_HELLO_BYTES} bytes"),
        ));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use libp2p::request_response::Codec;

    fn round_trip(len: usize) -> io::Result<Vec<u8>> {
        let sent: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut wire = Vec::new();
        block_on(HelloCodec.write_request(&HELLO_PROTOCOL, &mut wire, sent.clone()))?;
        let got = block_on(HelloCodec.read_request(&HELLO_PROTOCOL, &mut wire.as_slice()))?;
        assert_eq!(got, sent);
        let mut wire = Vec::new();
        block_on(HelloCodec.write_response(&HELLO_PROTOCOL, &mut wire, sent.clone()))?;
        block_on(HelloCodec.read_response(&HELLO_PROTOCOL, &mut wire.as_slice()))
    }

    #[test]
    fn a_hello_up_to_the_limit_goes_through_whole() {
        assert_eq!(round_trip(0).unwrap(), Vec::<u8>::new());
        assert_eq!(round_trip(MAX_HELLO_BYTES).unwrap().len(), MAX_HELLO_BYTES);
    }

    #[test]
    fn the_largest_hello_a_node_sends_fits_with_room() {
        use crate::wire::{
            DeviceKind, Hardware, MAX_BLOB_ADDRS, Message, NodeHello, WireRole,
            encode_blob_endpoint,
        };
        use gpuchain_protocol::signing::{Sig65, SigningKey};
        use gpuchain_protocol::types::Address;
        let addr: std::net::SocketAddr = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"
            .parse()
            .unwrap();
        let peer = libp2p::identity::Keypair::generate_ed25519()
            .public()
            .to_peer_id();
        let hello = NodeHello {
            peer_id: peer.to_bytes(),
            address: Address::ZERO,
            roles: vec![WireRole::Client, WireRole::Provider, WireRole::Verifier],
            hardware: Hardware {
                device: DeviceKind::Cpu,
                memory_bytes: u64::MAX,
            },
            blob_endpoint: encode_blob_endpoint(&"f".repeat(64), &[addr; MAX_BLOB_ADDRS]),
            issued_at: u64::MAX,
            signature: Sig65::ZERO,
        }
        .sign(&SigningKey::from_seed(1));
        let len = Message::NodeHello(hello).encode().len();
        assert!(len * 4 < MAX_HELLO_BYTES, "{len} bytes");
    }

    #[test]
    fn a_longer_stream_is_refused_without_reading_it_all() {
        let endless = futures::io::repeat(7);
        let mut limited = endless.take(10 * MAX_HELLO_BYTES as u64);
        let err = block_on(read_bounded(&mut limited)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        // Only one byte past the limit was taken off the stream.
        assert_eq!(
            limited.limit(),
            10 * MAX_HELLO_BYTES as u64 - MAX_HELLO_BYTES as u64 - 1
        );
    }
}
