//! A TCP forwarder between the nodes and anvil that the harness can cut and restore: "the
//! chain RPC went away for 20 s" without losing the chain (killing anvil would lose its
//! state, and a restarted anvil would be another chain). While cut, every open connection is
//! closed and every new one is closed as soon as it is accepted, so a node sees what it sees
//! when an RPC endpoint goes down: requests fail, then succeed again once it is restored.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context, Result};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Shared {
    cut: AtomicBool,
    /// The tasks forwarding open connections, aborted (their sockets closed) by a cut.
    conns: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    fn conns(&self) -> std::sync::MutexGuard<'_, Vec<AbortHandle>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the RPC proxy")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((down, _)) = listener.accept().await else {
                    continue;
                };
                if s.cut.load(Ordering::SeqCst) {
                    drop(down);
                    continue;
                }
                let task = tokio::spawn(forward(down, upstream));
                let mut conns = s.conns();
                conns.retain(|c| !c.is_finished());
                conns.push(task.abort_handle());
            }
        });
        Ok(Self {
            addr,
            shared,
            accept,
        })
    }

    /// Where the nodes connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Closes every open connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        for c in self.shared.conns().drain(..) {
            c.abort();
        }
    }

    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for c in self.shared.conns().drain(..) {
            c.abort();
        }
    }
}

async fn forward(mut down: TcpStream, upstream: SocketAddr) {
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return;
    };
    // Either side closing ends the connection; errors are the connection's end too.
    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An upstream that echoes every connection.
    async fn echo() -> Result<SocketAddr> {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?;
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        Ok(addr)
    }

    async fn round_trip(addr: SocketAddr) -> Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await?;
        Ok(buf.to_vec())
    }

    #[tokio::test]
    async fn forwards_drops_while_cut_and_forwards_again() -> Result<()> {
        let proxy = Proxy::start(echo().await?).await?;
        assert_eq!(round_trip(proxy.addr()).await?, b"ping");
        // An open connection dies with the cut.
        let mut open = TcpStream::connect(proxy.addr()).await?;
        open.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        open.read_exact(&mut buf).await?;
        proxy.cut();
        assert!(proxy.is_cut());
        let mut rest = Vec::new();
        let n = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            open.read_to_end(&mut rest),
        )
        .await?
        .unwrap_or(0);
        assert_eq!(n, 0, "the open connection was not closed by the cut");
        assert!(round_trip(proxy.addr()).await.is_err());
        proxy.restore();
        assert_eq!(round_trip(proxy.addr()).await?, b"ping");
        Ok(())
    }
}
