//! Starting one node process of a testnet: its data dir, password file and keystore, its
//! funding, its command line and environment, its log, and the wait until it is ready.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use alloy::primitives::Address;
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, Result, anyhow, bail};
use gpuchain_api::ADDR_FILE as API_ADDR_FILE;
use serde_json::Value;

use crate::node::{API_TIMEOUT, Bootstrap, NodeProc, NodeSpec};
use crate::process::Proc;
use crate::testnet::{PASSWORD, Testnet};
use crate::wait::POLL;

/// The node's keystore, relative to its data dir (the node's `keys::KEYSTORE_DIR` and
/// `KEYSTORE_FILE`).
const KEYSTORE: (&str, &str) = ("keystore", "node.json");
/// How long a bootstrapping node waits for its bootstrap peer.
const BOOTSTRAP_TIMEOUT_SECS: u64 = 20;

impl Testnet {
    /// Builds the node's files and process; `replacing` is the index of the node being
    /// restarted (its log is appended to, and it is no bootstrap candidate for itself).
    pub(crate) async fn launch(
        &self,
        spec: NodeSpec,
        replacing: Option<usize>,
    ) -> Result<NodeProc> {
        if !self.binary().is_file() {
            bail!(
                "the gpuchain binary {} does not exist: run `cargo build -p gpuchain` or set GPUCHAIN_BIN",
                self.binary().display()
            );
        }
        let name = spec.name.clone();
        let data_dir = self.run_dir().join(&name);
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("cannot create the data dir {}", data_dir.display()))?;
        let password_file = self.run_dir().join(format!("{name}.password"));
        write_private(&password_file, PASSWORD.as_bytes())?;
        let signer = ensure_keystore(&data_dir, PASSWORD, spec.eth_key.as_ref())?;

        let chain_flags = if spec.chain {
            let chain = self
                .chain()
                .with_context(|| format!("node {name} asks for the chain (NodeSpec::chain)"))?;
            Some((chain.node_rpc_url(), chain.escrow(), chain.chain_id()))
        } else {
            None
        };
        // Once, at its first start: a restarted node keeps what it had, as a real one would
        // (funding it again minted money the checkers' identity did not expect).
        if replacing.is_none() && (!spec.eth.is_zero() || !spec.usdc.is_zero()) {
            let chain = self
                .chain()
                .with_context(|| format!("node {name} asks for funds"))?;
            chain
                .fund(signer.address(), spec.eth, spec.usdc)
                .await
                .with_context(|| format!("funding node {name}"))?;
        }

        let bootstrap = self.bootstrap_addrs(&spec, replacing)?;
        let args = node_args(
            &spec,
            &data_dir,
            &password_file,
            &bootstrap,
            chain_flags.as_ref().map(|(u, e, c)| (u.as_str(), *e, *c)),
        );

        let log = self.run_dir().join(format!("{name}.log"));
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .truncate(false)
            .open(&log)
            .with_context(|| format!("cannot open the log {}", log.display()))?;
        if replacing.is_none() {
            out.set_len(0)
                .with_context(|| format!("cannot truncate {}", log.display()))?;
        }
        let err = out.try_clone()?;
        // A stale address from an earlier run would be read before the node removes it.
        let api_file = data_dir.join(API_ADDR_FILE);
        match std::fs::remove_file(&api_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot remove {}", api_file.display()));
            }
        }

        let mut cmd = Command::new(self.binary());
        cmd.args(&args).stdin(Stdio::null()).stdout(out).stderr(err);
        // Settings from the caller's environment would silently change every node.
        for (key, _) in std::env::vars_os() {
            if is_node_setting(&key) {
                cmd.env_remove(&key);
            }
        }
        if std::env::var_os(KERNEL_THREADS).is_none() {
            cmd.env(KERNEL_THREADS, kernel_threads_per_node().to_string());
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let started_at = SystemTime::now();
        let proc = Proc::spawn(&mut cmd)
            .with_context(|| format!("cannot start {}", self.binary().display()))?;
        let pid = proc.pid();
        let ready = wait_ready(&proc, &name, &data_dir, &log, spec.ready_timeout).await?;
        if let Some(reported) = ready.eth_address
            && reported != signer.address()
        {
            bail!(
                "node {name} reports Ethereum address {reported}, but its keystore holds {}: the harness and the node disagree on the keystore location",
                signer.address()
            );
        }
        Ok(NodeProc {
            spec,
            data_dir,
            log,
            password_file,
            signer,
            proc: Some(proc),
            pid,
            api: ready.client.addr(),
            client: ready.client.with_timeout(API_TIMEOUT),
            peer_id: ready.peer_id,
            listen: ready.listen,
            started_at,
            args,
        })
    }

    fn bootstrap_addrs(&self, spec: &NodeSpec, replacing: Option<usize>) -> Result<Vec<String>> {
        let running = |i: usize, n: &NodeProc| {
            Some(i) != replacing && n.is_running() && n.name() != spec.name
        };
        Ok(match &spec.bootstrap {
            Bootstrap::Off => Vec::new(),
            Bootstrap::Addrs(addrs) => addrs.clone(),
            Bootstrap::First => self
                .nodes()
                .iter()
                .enumerate()
                .find(|(i, n)| running(*i, n))
                .map(|(_, n)| vec![n.listen_addr().to_string()])
                .unwrap_or_default(),
            Bootstrap::Node(other) => {
                let (i, n) = self
                    .nodes()
                    .iter()
                    .enumerate()
                    .find(|(_, n)| n.name() == other)
                    .ok_or_else(|| {
                        anyhow!(
                            "node {}: bootstrap node {other:?} does not exist",
                            spec.name
                        )
                    })?;
                if !running(i, n) {
                    bail!(
                        "node {}: bootstrap node {other:?} is not running",
                        spec.name
                    );
                }
                vec![n.listen_addr().to_string()]
            }
        })
    }
}

/// Variables the node reads (flags' env twins, the password, the log filter).
/// Candle's CPU kernel thread count, read once by each node process.
const KERNEL_THREADS: &str = "CANDLE_NUM_THREADS";

/// How many kernel threads each node gets: a share of the host's cores. A testnet runs a
/// provider and two verifiers computing at once on one host, and candle's kernels wait for
/// their slowest thread by spinning; with every node fanning out to every core, a thread
/// descheduled for a neighbour's leaves the others spinning for a whole time slice. On two
/// cores the text demo's provider trained 2.5x slower that way than at one thread a node, and
/// its verifiers fell behind it. A caller's own `CANDLE_NUM_THREADS` is passed through.
fn kernel_threads_per_node() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 3).max(1)
}

fn is_node_setting(key: &OsString) -> bool {
    key.to_str()
        .is_some_and(|k| k.starts_with("GPUCHAIN_") || k == "RUST_LOG")
}

/// The node's command line after the binary.
fn node_args(
    spec: &NodeSpec,
    data_dir: &Path,
    password_file: &Path,
    bootstrap: &[String],
    chain: Option<(&str, Address, u64)>,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--log-format".into(),
        "json".into(),
        "node".into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--api".into(),
        "127.0.0.1:0".into(),
        "--listen".into(),
        "/ip4/127.0.0.1/tcp/0".into(),
        "--blob-bind".into(),
        "127.0.0.1:0".into(),
        "--keystore-password-file".into(),
        password_file.display().to_string(),
    ];
    for role in &spec.roles {
        args.extend(["--role".into(), role.clone()]);
    }
    for addr in bootstrap {
        args.extend(["--bootstrap".into(), addr.clone()]);
    }
    if !bootstrap.is_empty() {
        args.extend([
            "--bootstrap-timeout-secs".into(),
            BOOTSTRAP_TIMEOUT_SECS.to_string(),
        ]);
    }
    if let Some((rpc_url, escrow, chain_id)) = chain {
        args.extend([
            "--rpc-url".into(),
            rpc_url.to_string(),
            "--escrow".into(),
            escrow.to_string(),
            "--chain-id".into(),
            chain_id.to_string(),
        ]);
    }
    args.extend(spec.extra_args.iter().cloned());
    args
}

/// Opens the node's keystore, or writes one (with `key`, or a new random key) where the
/// node looks for it, so that the harness knows the node's address and key before it runs.
///
/// This writes the keystore file itself rather than calling the node crate's key code:
/// the node binary will depend on this crate for `gpuchain testnet`, and a dependency back
/// would be a cycle. The startup check against `/v1/status` catches any drift.
fn ensure_keystore(
    data_dir: &Path,
    password: &str,
    key: Option<&PrivateKeySigner>,
) -> Result<PrivateKeySigner> {
    let dir = data_dir.join(KEYSTORE.0);
    let path = dir.join(KEYSTORE.1);
    if path.exists() {
        return PrivateKeySigner::decrypt_keystore(&path, password)
            .map_err(|e| anyhow!("cannot open the keystore {}: {e}", path.display()));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let key = key.cloned().unwrap_or_else(PrivateKeySigner::random);
    let (signer, _) = PrivateKeySigner::encrypt_keystore(
        &dir,
        &mut rand08::thread_rng(),
        key.to_bytes(),
        password,
        Some(KEYSTORE.1),
    )
    .map_err(|e| anyhow!("cannot write the keystore {}: {e}", path.display()))?;
    restrict(&path)?;
    Ok(signer)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    restrict(path)
}

fn restrict(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))
}

struct Ready {
    client: gpuchain_api::ApiClient,
    peer_id: String,
    listen: String,
    eth_address: Option<Address>,
}

/// Waits until `api.addr` exists, `/v1/status` answers 200 and the node listens on loopback
/// tcp. Fails early when the process exits.
async fn wait_ready(
    proc: &Proc,
    name: &str,
    data_dir: &Path,
    log: &Path,
    timeout: Duration,
) -> Result<Ready> {
    let deadline = Instant::now() + timeout;
    let api_file = data_dir.join(API_ADDR_FILE);
    let mut last = String::from("no api.addr yet");
    loop {
        if let Some(status) = proc.try_exit() {
            bail!(
                "node {name} exited during startup ({status}); its log {}:\n{}",
                log.display(),
                crate::chain::tail(log)
            );
        }
        // The node writes its token before its address, so both are there once this is.
        if api_file.exists() {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(200), API_TIMEOUT);
            match gpuchain_api::ApiClient::for_data_dir(data_dir) {
                Ok(client) => {
                    let client = client.with_timeout(left);
                    match client.get::<Value>("/v1/status").await {
                        Ok(st) => match ready_from_status(client, &st) {
                            Some(ready) => return Ok(ready),
                            None => last = format!("status has no loopback tcp listener yet: {st}"),
                        },
                        Err(e) => last = e.to_string(),
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "node {name} was not ready within {timeout:?} ({last}); its log {}:\n{}",
                log.display(),
                crate::chain::tail(log)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

fn ready_from_status(client: gpuchain_api::ApiClient, st: &Value) -> Option<Ready> {
    let peer_id = st.get("peer_id")?.as_str()?.to_string();
    let tcp = st
        .get("listen_addrs")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find(|a| a.starts_with("/ip4/127.0.0.1/tcp/"))?;
    let listen = if tcp.contains("/p2p/") {
        tcp.to_string()
    } else {
        format!("{tcp}/p2p/{peer_id}")
    };
    let eth_address = st
        .get("eth_address")
        .and_then(Value::as_str)
        .and_then(|a| a.parse().ok());
    Some(Ready {
        client,
        peer_id,
        listen,
        eth_address,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_carry_roles_bootstrap_chain_and_extras_in_order() {
        let spec = NodeSpec::new("p1")
            .role("provider")
            .role("verifier")
            .arg("--heartbeat-period-ms")
            .arg("50");
        let escrow: Address = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
            .parse()
            .expect("address");
        let args = node_args(
            &spec,
            Path::new("/run/p1"),
            Path::new("/run/p1.password"),
            &["/ip4/127.0.0.1/tcp/1/p2p/X".to_string()],
            Some(("http://127.0.0.1:9", escrow, 31337)),
        );
        let line = args.join(" ");
        assert!(line.starts_with("--log-format json node --data-dir /run/p1 --api 127.0.0.1:0 --listen /ip4/127.0.0.1/tcp/0 --blob-bind 127.0.0.1:0 --keystore-password-file /run/p1.password"), "{line}");
        assert!(line.contains("--role provider --role verifier --bootstrap /ip4/127.0.0.1/tcp/1/p2p/X --bootstrap-timeout-secs 20"), "{line}");
        assert!(
            line.ends_with(&format!(
                "--rpc-url http://127.0.0.1:9 --escrow {escrow} --chain-id 31337 --heartbeat-period-ms 50"
            )),
            "{line}"
        );

        let plain = node_args(
            &NodeSpec::new("n"),
            Path::new("d"),
            Path::new("p"),
            &[],
            None,
        );
        let line = plain.join(" ");
        assert!(!line.contains("--bootstrap"), "{line}");
        assert!(!line.contains("--rpc-url"), "{line}");
        assert!(!line.contains("--role"), "{line}");
    }

    #[test]
    fn keystore_is_written_once_and_reopened() {
        let dir = tempfile::tempdir().expect("tmp");
        let key = PrivateKeySigner::random();
        let a = ensure_keystore(dir.path(), "pw", Some(&key)).expect("create");
        assert_eq!(a.address(), key.address());
        let b = ensure_keystore(dir.path(), "pw", None).expect("reopen");
        assert_eq!(b.to_bytes(), key.to_bytes());
        let e = ensure_keystore(dir.path(), "wrong", None).expect_err("wrong password");
        assert!(e.to_string().contains("keystore"), "{e}");
    }

    #[test]
    fn ready_needs_a_loopback_tcp_listener() {
        let api = gpuchain_api::ApiClient::new("127.0.0.1:1".parse().expect("addr"), None);
        let st = serde_json::json!({
            "peer_id": "12D3KooX",
            "eth_address": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
            "listen_addrs": ["/ip4/127.0.0.1/udp/5/quic-v1", "/ip4/127.0.0.1/tcp/4001"],
        });
        let r = ready_from_status(api.clone(), &st).expect("ready");
        assert_eq!(r.listen, "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooX");
        assert!(r.eth_address.is_some());
        let st = serde_json::json!({"peer_id": "x", "listen_addrs": []});
        assert!(ready_from_status(api, &st).is_none());
    }
}
