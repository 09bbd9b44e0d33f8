//! Node configuration: defaults, then the TOML file, then environment and flags (clap merges
//! those two), each layer overriding the one before.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use libp2p::Multiaddr;
use serde::Deserialize;

use crate::cli::NodeArgs;
pub use crate::cli::{Fault, Role};

/// Env var holding the keystore password (alternative to a password file).
pub const PASSWORD_ENV: &str = "GPUCHAIN_KEYSTORE_PASSWORD";
pub const DEFAULT_HEARTBEAT_PERIOD: Duration = Duration::from_millis(100);
pub const DEFAULT_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(20);

/// The TOML file's shape: every key optional, unknown keys rejected so that a typo is an
/// error instead of a silently ignored setting.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    roles: Option<Vec<Role>>,
    bootstrap: Option<Vec<String>>,
    data_dir: Option<PathBuf>,
    listen: Option<Vec<String>>,
    api: Option<SocketAddr>,
    api_allow_remote: Option<bool>,
    blob_import_dir: Option<PathBuf>,
    blob_export_dir: Option<PathBuf>,
    blob_bind: Option<SocketAddr>,
    relay: Option<String>,
    heartbeat_period_ms: Option<u64>,
    heartbeat_topics: Option<Vec<String>>,
    bootstrap_timeout_secs: Option<u64>,
    keystore_password_file: Option<PathBuf>,
    chain_id: Option<u64>,
    escrow: Option<String>,
    rpc_url: Option<String>,
    token: Option<String>,
    price_per_step: Option<String>,
    accept_tokens: Option<Vec<String>>,
    max_job_duration_secs: Option<u64>,
    max_grace_secs: Option<u64>,
    memory_mb: Option<u64>,
    detector_timeout_ms: Option<u64>,
    detector_floor_ms: Option<u64>,
    max_blob_mb: Option<u64>,
    fault: Option<Fault>,
    test_cheat_control: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub roles: BTreeSet<Role>,
    pub bootstrap: Vec<Multiaddr>,
    pub data_dir: PathBuf,
    pub listen: Vec<Multiaddr>,
    pub api: Option<SocketAddr>,
    /// The only folders the API reads blob files from and writes them to.
    pub blob_import_dir: Option<PathBuf>,
    pub blob_export_dir: Option<PathBuf>,
    pub blob_bind: SocketAddr,
    pub relay: Option<iroh::RelayUrl>,
    pub heartbeat_period: Duration,
    pub heartbeat_topics: Vec<String>,
    pub bootstrap_timeout: Duration,
    pub keystore_password_file: Option<PathBuf>,
    pub escrow_domain: gpuchain_protocol::eip712::EscrowDomain,
    /// Whether --chain-id was given (then it must match the chain's).
    pub chain_id_given: bool,
    pub rpc_url: Option<String>,
    pub token: Option<gpuchain_protocol::Address>,
    pub price_per_step: gpuchain_protocol::U256,
    /// Tokens a provider accepts payment in; empty: the escrow's stake token.
    pub accept_tokens: Vec<gpuchain_protocol::Address>,
    pub max_job_duration_secs: u64,
    pub max_grace_secs: u64,
    /// The memory this node offers for training, in bytes (`--memory-mb`); `None`: the
    /// machine's memory, detected at start.
    pub memory_bytes: Option<u64>,
    pub detector_timeout: Duration,
    /// The least adaptive liveness timeout (at most `detector_timeout`).
    pub detector_floor: Duration,
    /// The largest blob fetched from peers, in bytes.
    pub max_blob_bytes: u64,
    pub fault: Option<Fault>,
    /// The control API may make the provider's next checkpoint cheat (testnets only).
    pub test_cheat_control: bool,
    /// The control API may cut this node off from given peers (testnets only).
    pub test_partition_control: bool,
}

/// The largest blob fetched from peers, in MiB: a MiniLM checkpoint with its optimizer
/// moments is about 270 MB, and a real fine-tuning job's a few GB. A blob is addressed by its
/// hash, so a hostile peer can only make it large, not wrong; this bounds what that costs.
pub const DEFAULT_MAX_BLOB_MB: u64 = 8192;

/// The ceiling of the client's adaptive liveness timeout (and the timeout until a provider's
/// rhythm is known). The detector adapts below it to each provider's observed heartbeat
/// jitter, down to the floor: a steady provider that freezes is noticed in 0.3 s at the
/// default 100 ms period, while one whose heartbeats jitter (a congested mesh) widens its own
/// margin up to this ceiling instead of being failed over.
pub const DEFAULT_DETECTOR_TIMEOUT: Duration = Duration::from_millis(750);
/// The least adaptive liveness timeout by default: three heartbeat periods. What keeps
/// heartbeats on time on a host whose cores all train: training and checking run at a lower
/// CPU priority than the runtime that sends them (`compute`); log lines are written by a
/// thread of their own (`logging`); the chain cursor is synced on a blocking thread (an fsync
/// held every node's runtime for up to 0.6 s); nodes started together do not refresh
/// Kademlia or say hello in step (`behaviour::KAD_REFRESH`), and one that joins does not make
/// every other node say hello again (`hello`); a provider's heartbeats never
/// wait for the client's catch-up, and the client judges silence only after its swarm has
/// handed over what it had (`roles::late_timer`).
///
/// At 300 the detection bench (16 processes on 2 cores, 20 faults of each kind struck at a
/// random moment) noticed a frozen provider in 266 ms (p99 310) and a killed one in 158 ms
/// (p99 273), and failed no honest provider over. Before joins stopped the hello round, the
/// freeze p99 was 581: each restart in the bench held providers' heartbeats back for up to
/// 260 ms, and one such gap widened the adaptive timeout for the next 32 heartbeats. The false-failover soak at 300 (30 minutes, two jobs
/// training, a CPU hog) failed none over either: 1 heartbeat gap over 300 ms at the client in
/// 34,475, and the providers reported 2 heartbeats sent late, none by 300 ms. An earlier soak
/// had failed one over twice in 20 minutes, which kept the default at 500 until the cause
/// was found: every 30 s all nodes refreshed Kademlia and said hello at once, and the burst
/// held the providers' heartbeats back by up to 200 ms (their `heartbeat_late` events). A
/// client whose providers' hosts stall for longer can set `--detector-floor-ms 500`.
///
/// A heartbeat lost on the network and resent (Linux TCP's RACK resends it once the next
/// one's acknowledgement shows the loss) comes about two periods and a round trip after the
/// one before it. With half a period to spare, 300 covers round trips up to 40 ms; for a
/// provider further away the client raises its floor to that gap and half a period
/// (`one_loss_gap` in the protocol's detector), from the least round trip ping has measured.
pub const DEFAULT_DETECTOR_FLOOR: Duration = Duration::from_millis(300);
/// 0.001 USDC.
pub const DEFAULT_PRICE_PER_STEP: u64 = 1_000;
/// USDC's decimals: amounts on the command line are in whole tokens.
pub const TOKEN_DECIMALS: u8 = gpuchain_contracts::chain::TEST_USDC_DECIMALS;

/// `"5"`, `"0.0025"` → base units with `decimals` decimals; more digits than that, signs,
/// exponents and empty strings are errors naming the flag.
pub fn parse_amount(s: &str, decimals: u8, flag: &str) -> Result<gpuchain_protocol::U256> {
    gpuchain_contracts::chain::parse_tokens(s, decimals).map_err(|e| match e {
        gpuchain_contracts::chain::AmountError::Negative(_) => anyhow!("{flag} {e}"),
        _ => anyhow!(
            "{flag} {s:?} is not an amount ({e}); give a decimal number like 5 or 0.0025 (at most {decimals} decimals)"
        ),
    })
}

/// anvil's chain id: the local testnet's, and the default until the chain client lands.
pub const DEFAULT_CHAIN_ID: u64 = 31337;

impl NodeConfig {
    pub fn from_args(args: &NodeArgs) -> Result<Self> {
        let file = match &args.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        Self::merge(args, file)
    }

    /// The config a node started with `args` and a config file holding `text` runs with:
    /// the file parsed and checked exactly as [`NodeConfig::from_args`] reads one (`args.config`
    /// is not read). For tests and fuzzing of what an operator's file may hold.
    pub fn from_file_text(args: &NodeArgs, text: &str) -> Result<Self> {
        let file = parse_file(text).map_err(|e| anyhow!("config file is not valid: {e}"))?;
        Self::merge(args, file)
    }

    fn merge(args: &NodeArgs, file: FileConfig) -> Result<Self> {
        let roles: BTreeSet<Role> = if args.roles.is_empty() {
            file.roles.unwrap_or_default().into_iter().collect()
        } else {
            args.roles.iter().copied().collect()
        };
        let bootstrap = pick_list(&args.bootstrap, file.bootstrap)
            .iter()
            .map(|s| parse_multiaddr(s, "bootstrap"))
            .collect::<Result<Vec<_>>>()?;
        let mut listen = pick_list(&args.listen, file.listen)
            .iter()
            .map(|s| parse_multiaddr(s, "listen"))
            .collect::<Result<Vec<_>>>()?;
        if listen.is_empty() {
            listen = vec![
                parse_multiaddr("/ip4/0.0.0.0/tcp/4001", "listen")?,
                parse_multiaddr("/ip4/0.0.0.0/udp/4001/quic-v1", "listen")?,
            ];
        }
        let data_dir = args.data_dir.clone().or(file.data_dir).ok_or_else(|| {
            anyhow!(
                "no data dir: pass --data-dir DIR, set GPUCHAIN_DATA_DIR, or put data_dir in the config file"
            )
        })?;
        let api = args.api.or(file.api);
        let allow_remote = args.api_allow_remote || file.api_allow_remote.unwrap_or(false);
        if let Some(api) = api
            && !api.ip().is_loopback()
            && !allow_remote
        {
            bail!(
                "--api {api}: the control API binds loopback addresses (127.0.0.1 or [::1]) unless --api-allow-remote says otherwise (its token would cross the network in clear text)"
            );
        }
        let relay = match args.relay.clone().or(file.relay) {
            None => None,
            Some(s) => Some(s.parse::<iroh::RelayUrl>().map_err(|e| {
                anyhow!(
                    "--relay {s:?} is not a relay URL ({e}); give e.g. https://relay.example.org"
                )
            })?),
        };
        let heartbeat_ms = args.heartbeat_period_ms.or(file.heartbeat_period_ms);
        let heartbeat_period = match heartbeat_ms {
            Some(0) => bail!("--heartbeat-period-ms must be at least 1"),
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_HEARTBEAT_PERIOD,
        };
        // Named by a job's topic or its heartbeat topic, heartbeats go on the latter.
        let heartbeat_topics = pick_list(&args.heartbeat_topics, file.heartbeat_topics)
            .iter()
            .map(|t| crate::topics::heartbeat_topic_of(t))
            .collect::<Result<Vec<_>>>()?;
        let bootstrap_timeout = args
            .bootstrap_timeout_secs
            .or(file.bootstrap_timeout_secs)
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_BOOTSTRAP_TIMEOUT);
        let escrow = match args.escrow.clone().or(file.escrow) {
            None => gpuchain_protocol::types::Address::ZERO,
            Some(s) => s.parse().map_err(|e| {
                anyhow!("--escrow {s:?} is not an Ethereum address ({e}); give 0x followed by 40 hex digits")
            })?,
        };
        let chain_id = args.chain_id.or(file.chain_id);
        let escrow_domain = gpuchain_protocol::eip712::EscrowDomain {
            chain_id: chain_id.unwrap_or(DEFAULT_CHAIN_ID),
            escrow,
        };
        let rpc_url = args.rpc_url.clone().or(file.rpc_url);
        if !roles.is_empty() && (rpc_url.is_none() || escrow.is_zero()) {
            bail!(
                "roles {roles:?} act on the escrow contract: pass --rpc-url URL and --escrow ADDRESS (or set them in the config file)"
            );
        }
        let token = match args.token.clone().or(file.token) {
            None => None,
            Some(s) => Some(s.parse().map_err(|e| {
                anyhow!("--token {s:?} is not an Ethereum address ({e}); give 0x followed by 40 hex digits")
            })?),
        };
        let price_per_step = match args.price_per_step.clone().or(file.price_per_step) {
            Some(s) => parse_amount(&s, TOKEN_DECIMALS, "--price-per-step")?,
            None => gpuchain_protocol::U256::from(DEFAULT_PRICE_PER_STEP),
        };
        let accept_tokens = pick_list(&args.accept_tokens, file.accept_tokens)
            .iter()
            .map(|s| {
                s.parse().map_err(|e| {
                    anyhow!("--accept-token {s:?} is not an Ethereum address ({e}); give 0x followed by 40 hex digits")
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let max_job_duration_secs = args
            .max_job_duration_secs
            .or(file.max_job_duration_secs)
            .unwrap_or(gpuchain_protocol::provider::DEFAULT_MAX_DURATION_SECS);
        let max_grace_secs = args
            .max_grace_secs
            .or(file.max_grace_secs)
            .unwrap_or(gpuchain_protocol::provider::DEFAULT_MAX_GRACE_SECS);
        let memory_bytes = match args.memory_mb.or(file.memory_mb) {
            None => None,
            Some(0) => bail!(
                "--memory-mb must be at least 1: it is the memory this provider offers for training, in MiB"
            ),
            Some(mb) => Some(mb.checked_mul(1 << 20).ok_or_else(|| {
                anyhow!("--memory-mb {mb} is more bytes than a 64-bit count holds")
            })?),
        };
        let detector_timeout = match args.detector_timeout_ms.or(file.detector_timeout_ms) {
            Some(ms) if ms < 50 => bail!("--detector-timeout-ms must be at least 50"),
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_DETECTOR_TIMEOUT,
        };
        let detector_floor = match args.detector_floor_ms.or(file.detector_floor_ms) {
            Some(ms) if ms < 50 => bail!("--detector-floor-ms must be at least 50"),
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_DETECTOR_FLOOR,
        }
        .min(detector_timeout);
        let max_blob_bytes = match args.max_blob_mb.or(file.max_blob_mb) {
            Some(0) => bail!("--max-blob-mb must be at least 1"),
            Some(mb) => mb
                .checked_mul(1 << 20)
                .ok_or_else(|| anyhow!("--max-blob-mb {mb} is more bytes than a u64 holds"))?,
            None => DEFAULT_MAX_BLOB_MB << 20,
        };
        let fault = args.fault.or(file.fault);
        if let Some(f) = fault
            && !roles.contains(&f.role())
        {
            let role = match f.role() {
                Role::Verifier => "verifier",
                Role::Client => "client",
                Role::Provider => "provider",
            };
            bail!("--fault {f:?} makes a {role} cheat; it needs --role {role}");
        }
        let test_cheat_control =
            args.test_cheat_control || file.test_cheat_control.unwrap_or(false);
        if test_cheat_control && !roles.contains(&Role::Provider) {
            bail!(
                "--test-cheat-control makes a provider's checkpoints cheat; it needs --role provider"
            );
        }
        Ok(Self {
            test_cheat_control,
            test_partition_control: args.test_partition_control,
            escrow_domain,
            chain_id_given: chain_id.is_some(),
            rpc_url,
            token,
            price_per_step,
            accept_tokens,
            max_job_duration_secs,
            max_grace_secs,
            memory_bytes,
            detector_timeout,
            detector_floor,
            max_blob_bytes,
            fault,
            roles,
            bootstrap,
            data_dir,
            listen,
            api,
            blob_import_dir: args.blob_import_dir.clone().or(file.blob_import_dir),
            blob_export_dir: args.blob_export_dir.clone().or(file.blob_export_dir),
            blob_bind: args
                .blob_bind
                .or(file.blob_bind)
                .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
            relay,
            heartbeat_period,
            heartbeat_topics,
            bootstrap_timeout,
            keystore_password_file: args
                .keystore_password_file
                .clone()
                .or(file.keystore_password_file),
        })
    }

    /// The keystore password: from the file when one is configured, else from the env var.
    pub fn keystore_password(&self) -> Result<String> {
        read_keystore_password(self.keystore_password_file.as_deref())
    }
}

/// The keystore password: from `file` when given, else from the env var. The node and the
/// one-shot commands (withdraw, provider register) read it the same way.
pub fn read_keystore_password(file: Option<&Path>) -> Result<String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the keystore password file {}: check the path and its permissions",
                path.display()
            )
        })?;
        let pw = text.trim_end_matches(['\n', '\r']).to_string();
        if pw.is_empty() {
            bail!("the keystore password file {} is empty", path.display());
        }
        return Ok(pw);
    }
    match std::env::var(PASSWORD_ENV) {
        Ok(pw) if !pw.is_empty() => Ok(pw),
        _ => bail!(
            "the Ethereum keystore needs a password: set {PASSWORD_ENV} or pass --keystore-password-file FILE"
        ),
    }
}

fn pick_list(flag: &[String], file: Option<Vec<String>>) -> Vec<String> {
    if flag.is_empty() {
        file.unwrap_or_default()
    } else {
        flag.to_vec()
    }
}

fn parse_multiaddr(s: &str, what: &str) -> Result<Multiaddr> {
    s.parse::<Multiaddr>().map_err(|e| {
        anyhow!("--{what} {s:?} is not a multiaddr ({e}); expected e.g. /ip4/127.0.0.1/tcp/4001")
    })
}

fn load_file(path: &Path) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read config file {}: check that it exists and is readable",
            path.display()
        )
    })?;
    parse_file(&text).map_err(|e| anyhow!("config file {} is not valid: {e}", path.display()))
}

fn parse_file(text: &str) -> std::result::Result<FileConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// TOML a hostile or careless operator could write: known keys with values at the edges
    /// of their types, wrong types, unknown keys, and lines that are not TOML.
    pub(crate) fn toml_lines(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
        let value = prop_oneof![
            prop_oneof![
                Just(0i64),
                Just(1),
                Just(-1),
                Just(i64::MAX),
                Just(i64::MIN),
                any::<i64>()
            ]
            .prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|f| format!("{f:?}")),
            "\\PC{0,24}".prop_map(|s| format!("{s:?}")),
            any::<bool>().prop_map(|b| b.to_string()),
            proptest::collection::vec(any::<u32>(), 0..4).prop_map(|v| format!("{v:?}")),
            Just("\"0x0000000000000000000000000000000000000000\"".to_string()),
            Just("\"127.0.0.1:0\"".to_string()),
            Just("[\"client\", \"provider\", \"verifier\"]".to_string()),
        ];
        let key = prop_oneof![
            proptest::sample::select(keys).prop_map(str::to_string),
            "[a-z_]{1,12}",
        ];
        let line = prop_oneof![
            8 => (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
            1 => "\\PC{0,30}",
        ];
        proptest::collection::vec(line, 0..8).prop_map(|l| l.join("\n"))
    }

    const CONFIG_KEYS: &[&str] = &[
        "roles",
        "bootstrap",
        "listen",
        "api",
        "api_allow_remote",
        "blob_bind",
        "relay",
        "heartbeat_period_ms",
        "heartbeat_topics",
        "bootstrap_timeout_secs",
        "chain_id",
        "escrow",
        "rpc_url",
        "token",
        "price_per_step",
        "accept_tokens",
        "max_job_duration_secs",
        "max_grace_secs",
        "memory_mb",
        "detector_timeout_ms",
        "detector_floor_ms",
        "max_blob_mb",
        "fault",
        "test_cheat_control",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any config file is refused with an error or read into a config; none panics.
        #[test]
        fn any_config_file_is_refused_or_read(text in toml_lines(CONFIG_KEYS)) {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("node.toml");
            std::fs::write(&path, &text).expect("write");
            let mut a = args();
            a.config = Some(path);
            if let Ok(c) = NodeConfig::from_args(&a) {
                // What it read keeps the rules every config must keep.
                prop_assert!(c.detector_timeout >= Duration::from_millis(50));
                prop_assert!(c.detector_floor <= c.detector_timeout);
                prop_assert!(c.max_blob_bytes >= 1 << 20);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Arbitrary text, not only key = value lines, as a config file: refused or read.
        #[test]
        fn any_text_as_a_config_file_is_refused_or_read(text in "(\\PC|\n){0,200}") {
            if let Ok(c) = NodeConfig::from_file_text(&args(), &text) {
                prop_assert!(c.detector_floor <= c.detector_timeout);
            }
        }
    }

    fn args() -> NodeArgs {
        NodeArgs {
            data_dir: Some(PathBuf::from("d")),
            ..Default::default()
        }
    }

    #[test]
    fn amounts_parse_to_base_units_and_back() {
        use gpuchain_protocol::U256;
        let p = |s: &str| parse_amount(s, 6, "--x");
        assert_eq!(p("5").expect("5"), U256::from(5_000_000u64));
        assert_eq!(p("0.0025").expect("frac"), U256::from(2_500u64));
        assert_eq!(p(".5").expect("leading dot"), U256::from(500_000u64));
        assert_eq!(p("1.").expect("trailing dot"), U256::from(1_000_000u64));
        for bad in ["", ".", "-1", "1e3", "0.0000001", "1,5", " 1"] {
            assert!(p(bad).is_err(), "{bad:?} accepted");
        }
        let e = p("-1").expect_err("negative");
        assert_eq!(e.to_string(), "--x must be positive, got -1");
    }

    #[test]
    fn defaults_apply() {
        let c = NodeConfig::from_args(&args()).expect("config");
        assert_eq!(c.heartbeat_period, DEFAULT_HEARTBEAT_PERIOD);
        assert_eq!(c.listen.len(), 2);
        assert!(c.relay.is_none());
        assert_eq!(c.max_blob_bytes, 8192 << 20);
    }

    #[test]
    fn the_blob_limit_is_in_mib_and_never_zero_or_overflowing() {
        let mut a = args();
        a.max_blob_mb = Some(16);
        assert_eq!(
            NodeConfig::from_args(&a).expect("16 MiB").max_blob_bytes,
            16 << 20
        );
        for bad in [0, u64::MAX] {
            a.max_blob_mb = Some(bad);
            let e = NodeConfig::from_args(&a).expect_err("refused");
            assert!(e.to_string().contains("--max-blob-mb"), "{e}");
        }
    }

    #[test]
    fn flag_beats_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("c.toml");
        std::fs::write(
            &p,
            "heartbeat_period_ms = 250\nroles = [\"verifier\"]\nrpc_url = \"http://127.0.0.1:8545\"\nescrow = \"0x00000000000000000000000000000000000000e5\"\n",
        )
        .expect("write");
        let mut a = args();
        a.config = Some(p.clone());
        let c = NodeConfig::from_args(&a).expect("config");
        assert_eq!(c.heartbeat_period, Duration::from_millis(250));
        assert!(c.roles.contains(&Role::Verifier));
        a.heartbeat_period_ms = Some(50);
        let c = NodeConfig::from_args(&a).expect("config");
        assert_eq!(c.heartbeat_period, Duration::from_millis(50));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "heartbeat_period = 250\n").expect("write");
        let mut a = args();
        a.config = Some(p);
        let e = NodeConfig::from_args(&a).expect_err("unknown key");
        assert!(e.to_string().contains("heartbeat_period"), "{e}");

        let mut a = args();
        a.roles = vec![Role::Provider];
        let e = NodeConfig::from_args(&a).expect_err("roles without a chain");
        assert!(e.to_string().contains("--rpc-url"), "{e}");

        let mut a = args();
        a.fault = Some(Fault::Junk);
        let e = NodeConfig::from_args(&a).expect_err("fault without provider");
        assert!(e.to_string().contains("--role provider"), "{e}");
        let mut a = args();
        a.fault = Some(Fault::RejectAll);
        let e = NodeConfig::from_args(&a).expect_err("verifier fault without the role");
        assert!(e.to_string().contains("--role verifier"), "{e}");

        let mut a = args();
        a.price_per_step = Some("1e-3".into());
        let e = NodeConfig::from_args(&a).expect_err("bad amount");
        assert!(e.to_string().contains("--price-per-step"), "{e}");

        let mut a = args();
        a.bootstrap = vec!["not-an-addr".into()];
        assert!(NodeConfig::from_args(&a).is_err());

        let mut a = args();
        a.api = Some("0.0.0.0:1".parse().expect("addr"));
        let e = NodeConfig::from_args(&a).expect_err("remote API without the flag");
        assert!(format!("{e}").contains("--api-allow-remote"), "{e}");
        a.api_allow_remote = true;
        assert_eq!(
            NodeConfig::from_args(&a).expect("explicitly allowed").api,
            a.api
        );

        let mut a = args();
        a.data_dir = None;
        assert!(NodeConfig::from_args(&a).is_err());

        let mut a = args();
        a.memory_mb = Some(0);
        let e = NodeConfig::from_args(&a).expect_err("no memory");
        assert!(
            e.to_string().contains("--memory-mb must be at least 1"),
            "{e}"
        );
        a.memory_mb = Some(u64::MAX);
        let e = NodeConfig::from_args(&a).expect_err("overflow");
        assert!(e.to_string().contains("--memory-mb"), "{e}");
    }

    #[test]
    fn memory_is_declared_in_mib_or_detected() {
        assert_eq!(
            NodeConfig::from_args(&args()).expect("config").memory_bytes,
            None
        );
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "memory_mb = 16\n").expect("write");
        let mut a = args();
        a.config = Some(p);
        let c = NodeConfig::from_args(&a).expect("config");
        assert_eq!(c.memory_bytes, Some(16 << 20));
        a.memory_mb = Some(4);
        let c = NodeConfig::from_args(&a).expect("config");
        assert_eq!(c.memory_bytes, Some(4 << 20), "the flag beats the file");
        assert_eq!(crate::hardware::local(c.memory_bytes).memory_bytes, 4 << 20);
    }
}
