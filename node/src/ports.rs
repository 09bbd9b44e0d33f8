//! Refusing busy ports before anything binds. libp2p's TCP transport sets SO_REUSEPORT on
//! its listeners (so dials can reuse the port), and Linux then lets a second process with
//! the same option bind the very same address: two nodes would share one port and peers
//! would reach whichever the kernel picks ("Unexpected peer ID"). A probe bind without the
//! option fails while anyone listens there, so every fixed port is probed first.

use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};

use anyhow::{Result, bail};
use libp2p::Multiaddr;
use libp2p::multiaddr::Protocol;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp,
    Udp,
}

/// Every listen address with a fixed port, the blob socket and the API address must be
/// free; port 0 (the OS picks) always is.
pub fn check_free(
    listen: &[Multiaddr],
    blob_bind: SocketAddr,
    api: Option<SocketAddr>,
) -> Result<()> {
    for addr in listen {
        if let Some((sock, t)) = socket_of(addr) {
            probe(sock, t, &format!("listen address {addr}"), "--listen")?;
        }
    }
    probe(blob_bind, Transport::Udp, "blob endpoint", "--blob-bind")?;
    if let Some(api) = api {
        probe(api, Transport::Tcp, "control API", "--api")?;
    }
    Ok(())
}

fn socket_of(addr: &Multiaddr) -> Option<(SocketAddr, Transport)> {
    let mut it = addr.iter();
    let ip: IpAddr = match it.next()? {
        Protocol::Ip4(ip) => ip.into(),
        Protocol::Ip6(ip) => ip.into(),
        _ => return None,
    };
    match it.next()? {
        Protocol::Tcp(port) => Some((SocketAddr::new(ip, port), Transport::Tcp)),
        Protocol::Udp(port) => Some((SocketAddr::new(ip, port), Transport::Udp)),
        _ => None,
    }
}

fn probe(sock: SocketAddr, t: Transport, what: &str, flag: &str) -> Result<()> {
    if sock.port() == 0 {
        return Ok(());
    }
    let result = match t {
        Transport::Tcp => TcpListener::bind(sock).map(drop),
        Transport::Udp => UdpSocket::bind(sock).map(drop),
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => bail!(
            "{what}: port {}/{} on {} is already in use (another gpuchain node, or another program, listens there); stop it or pick another port with {flag}",
            sock.port(),
            if t == Transport::Tcp { "tcp" } else { "udp" },
            sock.ip()
        ),
        Err(e) => bail!("{what}: cannot bind {sock}: {e}; pick another address with {flag}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_tcp_or_udp_port_is_refused_with_its_number() {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = tcp.local_addr().expect("addr").port();
        let addr: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}").parse().expect("ma");
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let e = check_free(&[addr], any, None).expect_err("busy tcp");
        assert!(format!("{e}").contains(&format!("port {port}/tcp")), "{e}");

        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let uport = udp.local_addr().expect("addr").port();
        let quic: Multiaddr = format!("/ip4/127.0.0.1/udp/{uport}/quic-v1")
            .parse()
            .expect("ma");
        let e = check_free(&[quic], any, None).expect_err("busy udp");
        assert!(format!("{e}").contains(&format!("port {uport}/udp")), "{e}");
        let e = check_free(&[], udp.local_addr().expect("addr"), None).expect_err("blob");
        assert!(format!("{e}").contains("--blob-bind"), "{e}");
        let e = check_free(&[], any, Some(tcp.local_addr().expect("addr"))).expect_err("api");
        assert!(format!("{e}").contains("--api"), "{e}");
    }

    #[test]
    fn free_and_ephemeral_ports_pass() {
        let free = {
            let l = TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let addrs: Vec<Multiaddr> = vec![
            "/ip4/127.0.0.1/tcp/0".parse().expect("ma"),
            format!("/ip4/127.0.0.1/tcp/{free}").parse().expect("ma"),
            "/dns4/example.org/tcp/4001".parse().expect("ma"),
        ];
        check_free(&addrs, "127.0.0.1:0".parse().expect("addr"), None).expect("free");
    }
}
