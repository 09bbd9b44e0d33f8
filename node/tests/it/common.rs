//! Test harness: real `gpuchain node` processes on loopback, observed and driven through
//! their control API. Every child is killed (and reaped) on drop, so no test leaves a
//! process behind, even when it panics.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const PASSWORD: &str = "test-password";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gpuchain")
}

/// A `gpuchain` command with the test password and quiet logs.
pub fn command() -> Command {
    let mut c = Command::new(bin());
    c.env("GPUCHAIN_KEYSTORE_PASSWORD", PASSWORD)
        .env("RUST_LOG", "info,libp2p=warn,iroh=warn,iroh_blobs=warn")
        .env_remove("GPUCHAIN_CONFIG")
        .env_remove("GPUCHAIN_DATA_DIR")
        .env_remove("GPUCHAIN_BOOTSTRAP");
    c
}

pub struct Node {
    pub name: String,
    child: Option<Child>,
    pub dir: PathBuf,
    pub log: PathBuf,
    pub api: SocketAddr,
    pub peer_id: String,
    pub tcp_addr: String,
    extra: Vec<String>,
}

impl Node {
    /// Starts a node in `dir` listening on loopback tcp+quic with ephemeral ports.
    pub fn start(name: &str, dir: &Path, bootstrap: Option<&str>, extra: &[&str]) -> Node {
        let mut args: Vec<String> = Vec::new();
        if let Some(b) = bootstrap {
            args.push("--bootstrap".into());
            args.push(b.into());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut n = Node {
            name: name.to_string(),
            child: None,
            dir: dir.to_path_buf(),
            log: dir.with_extension("log"),
            api: "127.0.0.1:0".parse().expect("addr"),
            peer_id: String::new(),
            tcp_addr: String::new(),
            extra: args,
        };
        n.spawn();
        n
    }

    fn spawn(&mut self) {
        std::fs::create_dir_all(&self.dir).expect("data dir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let api_file = self.dir.join("api.addr");
        let _ = std::fs::remove_file(&api_file);
        let child = command()
            .arg("node")
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen", "/ip4/127.0.0.1/tcp/0"])
            .args(["--listen", "/ip4/127.0.0.1/udp/0/quic-v1"])
            .args(["--api", "127.0.0.1:0", "--blob-bind", "127.0.0.1:0"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn gpuchain");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(s) = std::fs::read_to_string(&api_file)
                && let Ok(a) = s.trim().parse()
            {
                self.api = a;
                break;
            }
            if let Some(status) = self.try_wait() {
                panic!(
                    "{} exited early ({status}):\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not start:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let st = self.status();
        self.peer_id = st["peer_id"].as_str().expect("peer_id").to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = self.status();
            let tcp = st["listen_addrs"]
                .as_array()
                .expect("listen_addrs")
                .iter()
                .filter_map(|a| a.as_str())
                .find(|a| a.contains("/tcp/"))
                .map(str::to_string);
            if let Some(a) = tcp {
                self.tcp_addr = format!("{a}/p2p/{}", self.peer_id);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} has no tcp listener",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the node again on the same data dir (after a kill or exit).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).expect("running")
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL, like `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for the exit status.
    pub fn terminate(&mut self, within: Duration) -> ExitStatus {
        let pid = self.pid();
        let ok = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(ok.success());
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.try_wait() {
                self.child = None;
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "{} ignored SIGTERM:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = s.len().saturating_sub(4000);
        s[s.floor_char_boundary(start)..].to_string()
    }

    pub fn get(&self, path: &str) -> Value {
        let (code, v) = http(self.api, "GET", path, None);
        assert_eq!(code, 200, "{} GET {path}: {v}", self.name);
        v
    }

    pub fn post(&self, path: &str, body: Value) -> (u16, Value) {
        http(self.api, "POST", path, Some(body))
    }

    pub fn post_ok(&self, path: &str, body: Value) -> Value {
        let (code, v) = self.post(path, body);
        assert_eq!(
            code,
            200,
            "{} POST {path}: {v}\n{}",
            self.name,
            self.log_tail()
        );
        v
    }

    pub fn status(&self) -> Value {
        self.get("/v1/status")
    }

    pub fn peers(&self) -> Vec<Value> {
        self.get("/v1/peers")
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub fn peer(&self, id: &str) -> Option<Value> {
        self.peers().into_iter().find(|p| p["peer_id"] == id)
    }

    /// True once this node has had a hello (with blob addresses) from `id`.
    pub fn knows_blobs_of(&self, id: &str) -> bool {
        self.peer(id)
            .is_some_and(|p| p["blob_addrs"].as_array().is_some_and(|a| !a.is_empty()))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `f` until it returns true, or panics with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Minimal HTTP/1.1 client (one request per connection) so tests need no HTTP library.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).expect("connect to control API");
    s.set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send request");
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).expect("read response");
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n").expect("http response");
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (code, v)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Writes `len` pseudo-random bytes (xorshift, seeded) to `path`.
pub fn random_file(path: &Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut buf = vec![0u8; len];
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    std::fs::write(path, buf).expect("write test file");
}

/// Starts `n` nodes, the first being the bootstrap of the others.
pub fn start_mesh(root: &Path, n: usize, extra: &[&str]) -> Vec<Node> {
    let first = Node::start("node0", &root.join("node0"), None, extra);
    let boot = first.tcp_addr.clone();
    let mut nodes = vec![first];
    for i in 1..n {
        let name = format!("node{i}");
        nodes.push(Node::start(&name, &root.join(&name), Some(&boot), extra));
    }
    nodes
}
