//! Test harness: real `gpuchain node` processes on loopback, observed and driven through
//! their control API. Every child is killed (and reaped) on drop, so no test leaves a
//! process behind, even when it panics.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
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
    /// The node's API with its token (of the latest run).
    pub client: Option<gpuchain_api::ApiClient>,
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
            client: None,
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
            if api_file.exists()
                && let Ok(c) = gpuchain_api::ApiClient::for_data_dir(&self.dir)
            {
                self.api = c.addr();
                self.client = Some(c.with_timeout(Duration::from_secs(300)));
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
        let (code, v) = self.request("GET", path, None, &[]);
        assert_eq!(code, 200, "{} GET {path}: {v}", self.name);
        v
    }

    pub fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.request("POST", path, Some(body), &[])
    }

    /// Any request, with extra headers (they replace the token's when they name it); the
    /// status and body whatever the status.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let client = self.client.as_ref().expect("node started");
        let r = block_on(client.send(method, path, body.as_ref(), headers))
            .unwrap_or_else(|e| panic!("{} {method} {path}: {e}", self.name));
        (r.status, r.body)
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

/// Runs an API call to completion from synchronous test code, also when that code is
/// itself inside an async test (where blocking the runtime's own thread would panic).
pub fn block_on<F: std::future::Future + Send>(f: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| runtime().block_on(f))
            .join()
            .expect("API call thread")
    })
}

/// One runtime for the synchronous tests' API calls (the API client is async).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("test runtime")
    })
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
