//! The node's own flags (`gpuchain node …`) and the log format. The binary crate
//! (`node/bin`) composes these with the other subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args, Default)]
pub struct NodeArgs {
    /// TOML config file. Keys are the long flag names with `_` for `-` (for example
    /// `data_dir`, `listen = [..]`, `roles = [..]`); unknown keys are an error.
    #[arg(long, env = "GPUCHAIN_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Role(s) this node plays: client, provider, verifier. Repeat the flag or separate with
    /// commas to combine them. Default: none (a plain relay and blob peer).
    #[arg(
        long = "role",
        env = "GPUCHAIN_ROLE",
        value_delimiter = ',',
        value_enum
    )]
    pub roles: Vec<crate::config::Role>,

    /// Multiaddr of a peer to join the swarm through, e.g. `/ip4/10.0.0.5/tcp/4001` (a trailing
    /// `/p2p/<peer id>` is checked when given). Repeatable. Without one the node starts a new swarm.
    #[arg(
        long,
        env = "GPUCHAIN_BOOTSTRAP",
        value_delimiter = ',',
        value_name = "MULTIADDR"
    )]
    pub bootstrap: Vec<String>,

    /// Directory for keys, the blob store and runtime files; created if missing.
    #[arg(long, env = "GPUCHAIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// libp2p listen multiaddr (tcp and/or quic-v1). Repeatable.
    /// Default: `/ip4/0.0.0.0/tcp/4001` and `/ip4/0.0.0.0/udp/4001/quic-v1`.
    #[arg(
        long,
        env = "GPUCHAIN_LISTEN",
        value_delimiter = ',',
        value_name = "MULTIADDR"
    )]
    pub listen: Vec<String>,

    /// Serve the control API (status, peers, publish, blobs, jobs) on this address, e.g.
    /// `127.0.0.1:0`. Every request needs the bearer token the node keeps in
    /// `<data dir>/api.token` (0600). The bound address is written to `<data dir>/api.addr`
    /// and logged. Loopback only unless --api-allow-remote. Default: no API.
    #[arg(long, env = "GPUCHAIN_API", value_name = "ADDR")]
    pub api: Option<SocketAddr>,

    /// Allow --api on a non-loopback address. The token then crosses the network in clear
    /// text: put a TLS proxy in front, or keep the API on loopback.
    #[arg(long, env = "GPUCHAIN_API_ALLOW_REMOTE")]
    pub api_allow_remote: bool,

    /// The only folder the API imports blob files from. Default: `<data dir>/import`.
    #[arg(long, env = "GPUCHAIN_BLOB_IMPORT_DIR", value_name = "DIR")]
    pub blob_import_dir: Option<PathBuf>,

    /// The only folder the API exports blobs to. Default: `<data dir>/export`.
    #[arg(long, env = "GPUCHAIN_BLOB_EXPORT_DIR", value_name = "DIR")]
    pub blob_export_dir: Option<PathBuf>,

    /// UDP socket for the iroh blob endpoint. Default: `0.0.0.0:0` (any interface, any port).
    #[arg(long, env = "GPUCHAIN_BLOB_BIND", value_name = "ADDR")]
    pub blob_bind: Option<SocketAddr>,

    /// iroh relay URL for blob transfers across NATs. Default: relays off (direct addresses only).
    #[arg(long, env = "GPUCHAIN_RELAY", value_name = "URL")]
    pub relay: Option<String>,

    /// Period of provider heartbeats on a job topic, in milliseconds. Default: 100.
    #[arg(long, env = "GPUCHAIN_HEARTBEAT_PERIOD_MS", value_name = "MS")]
    pub heartbeat_period_ms: Option<u64>,

    /// Publish heartbeats on this topic from the start (used by tests and benchmarks until jobs
    /// drive heartbeats). Repeatable.
    #[arg(
        long = "heartbeat-topic",
        env = "GPUCHAIN_HEARTBEAT_TOPIC",
        value_delimiter = ','
    )]
    pub heartbeat_topics: Vec<String>,

    /// Give up and exit non-zero when no bootstrap peer answered within this many seconds.
    /// Default: 20.
    #[arg(long, env = "GPUCHAIN_BOOTSTRAP_TIMEOUT_SECS", value_name = "SECS")]
    pub bootstrap_timeout_secs: Option<u64>,

    /// JSON-RPC URL of the chain holding the escrow, e.g. `http://127.0.0.1:8545`. Needed by
    /// every role (the chain is the only shared authority).
    #[arg(long, env = "GPUCHAIN_RPC_URL", value_name = "URL")]
    pub rpc_url: Option<String>,

    /// ERC-20 token jobs are paid in. Default: the escrow's stake token.
    #[arg(long, env = "GPUCHAIN_TOKEN", value_name = "ADDRESS")]
    pub token: Option<String>,

    /// Provider: price asked per training step, in token units (e.g. `0.003` USDC).
    /// Default: 0.001.
    #[arg(long, env = "GPUCHAIN_PRICE_PER_STEP", value_name = "AMOUNT")]
    pub price_per_step: Option<String>,

    /// Client: declare a provider lost after this many milliseconds without a heartbeat (a
    /// closed connection is acted on sooner). Default: 750.
    #[arg(long, env = "GPUCHAIN_DETECTOR_TIMEOUT_MS", value_name = "MS")]
    pub detector_timeout_ms: Option<u64>,

    /// TESTING ONLY: make this provider cheat in the given way, to see it refused and
    /// slashed. Never set by default.
    #[arg(long, env = "GPUCHAIN_FAULT", value_enum, value_name = "KIND")]
    pub fault: Option<crate::roles::Fault>,

    /// Chain id of the EIP-712 domain that bids and votes are signed for. With --rpc-url it
    /// is read from the chain (and must match when given). Default: 31337 (anvil).
    #[arg(long, env = "GPUCHAIN_CHAIN_ID", value_name = "ID")]
    pub chain_id: Option<u64>,

    /// JobEscrow contract address of that EIP-712 domain. Default: the zero address.
    #[arg(long, env = "GPUCHAIN_ESCROW", value_name = "ADDRESS")]
    pub escrow: Option<String>,

    /// File holding the password of the Ethereum keystore. Alternatively set
    /// GPUCHAIN_KEYSTORE_PASSWORD. The password is never taken as a flag value so that it
    /// does not show in the process list.
    #[arg(long, env = "GPUCHAIN_KEYSTORE_PASSWORD_FILE", value_name = "FILE")]
    pub keystore_password_file: Option<PathBuf>,
}
