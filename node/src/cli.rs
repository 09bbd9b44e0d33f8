//! Every flag and value the node's command line takes: the node's own flags (`gpuchain node …`),
//! the one-shot subcommands' arguments, the roles, the test faults and the log format. A leaf:
//! it depends on no other module of this crate, so configuration and startup can use these
//! types without reaching back into command-line code. The binary crate (`node/bin`) mounts
//! them beside the other subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

/// A part this node plays in the market.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Client,
    Provider,
    Verifier,
}

/// Steps past the epoch's first checkpoint at which `--fault hang` stops training: the
/// client has seen a whole interval of steps by then, so it knows the step time.
pub const HANG_AFTER_CHECKPOINT: u64 = 5;

/// Provider faults for tests and the demo; never on unless asked for by flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// Announce a well-formed checkpoint of random weights.
    Junk,
    /// Announce the interval's starting state as the work of the whole interval.
    Stale,
    /// Announce a checkpoint with a NaN weight.
    Nan,
    /// Train on the batches of another seed's data order.
    WrongOrder,
    /// A hung GPU: training stops making progress [`HANG_AFTER_CHECKPOINT`] steps after the
    /// epoch's first checkpoint, while the process keeps heartbeating (the client should
    /// call it stalled and fail the job over).
    Hang,
    /// A crash while a checkpoint is written: the process aborts (no cleanup, like kill -9)
    /// a moment after it starts storing its first checkpoint of an epoch, to show that a
    /// restart on the same data dir opens the store and serves no half-written blob.
    CrashMidCheckpoint,
    /// A byzantine verifier: vote reject on every checkpoint, whatever its quality test says.
    RejectAll,
    /// A hostile client: never submit the accept of a checkpoint; end the provider's epoch
    /// instead once a quorum has accepted (the escrow's decision window still pays it).
    WithholdPay,
}

impl Fault {
    /// The role a fault cheats in.
    pub fn role(self) -> Role {
        match self {
            Fault::Junk
            | Fault::Stale
            | Fault::Nan
            | Fault::WrongOrder
            | Fault::Hang
            | Fault::CrashMidCheckpoint => Role::Provider,
            Fault::RejectAll => Role::Verifier,
            Fault::WithholdPay => Role::Client,
        }
    }
}

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
    pub roles: Vec<Role>,

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

    /// Provider: tokens it accepts payment in (repeat the flag for several). Default: the
    /// escrow's stake token.
    #[arg(long = "accept-token", value_name = "ADDRESS")]
    pub accept_tokens: Vec<String>,

    /// Provider: the furthest a job's deadline may be from now for it to bid, in seconds:
    /// how long one epoch can hold its stake. Default: 30 days.
    #[arg(long, env = "GPUCHAIN_MAX_JOB_DURATION_SECS", value_name = "SECS")]
    pub max_job_duration_secs: Option<u64>,

    /// Provider: the longest grace after a job's deadline it accepts, in seconds.
    /// Default: 1 day.
    #[arg(long, env = "GPUCHAIN_MAX_GRACE_SECS", value_name = "SECS")]
    pub max_grace_secs: Option<u64>,

    /// Provider: the memory it offers for training, in MiB (at least 1). It is the memory
    /// its hellos and bids declare, and the trainer's budget: the model's state (weights,
    /// gradients, Adam moments) comes out of it first, and the largest micro-batch whose
    /// activations fit in the rest is chosen. A job whose model does not fit with one example
    /// gets no bid. Default: the machine's memory (MemTotal).
    #[arg(long, env = "GPUCHAIN_MEMORY_MB", value_name = "MIB")]
    pub memory_mb: Option<u64>,

    /// Client: the longest wait for a heartbeat before declaring a provider lost (a closed
    /// connection is acted on sooner). The client adapts below it to each provider's observed
    /// heartbeat jitter, down to --detector-floor-ms. Default: 750.
    #[arg(long, env = "GPUCHAIN_DETECTOR_TIMEOUT_MS", value_name = "MS")]
    pub detector_timeout_ms: Option<u64>,

    /// Client: the least liveness timeout the client adapts down to for a provider with a
    /// steady heartbeat (at most --detector-timeout-ms). The default, 300, notices a frozen
    /// provider in 0.2 to 0.3 s at a 100 ms period; a provider whose host stops it for longer
    /// than that is failed over, so where providers' hosts stall 500 keeps a wider margin
    /// (0.4 to 0.5 s). For a provider further away the client raises it by the round trip it
    /// measures.
    #[arg(long, env = "GPUCHAIN_DETECTOR_FLOOR_MS", value_name = "MS")]
    pub detector_floor_ms: Option<u64>,

    /// The largest blob this node fetches from peers, in MiB (checkpoints, models, data sets).
    /// A peer can name any hash, and a blob that matches its hash may still be huge: a fetch
    /// that outgrows this is stopped and refused. Default: 8192.
    #[arg(long, env = "GPUCHAIN_MAX_BLOB_MB", value_name = "MIB")]
    pub max_blob_mb: Option<u64>,

    /// TESTING ONLY: make this node cheat in the given way (a provider's junk, a verifier's
    /// rejects, a client's withheld pay), to see the network refuse it. Never set by default.
    #[arg(long, env = "GPUCHAIN_FAULT", value_enum, value_name = "KIND")]
    pub fault: Option<Fault>,

    /// TESTING ONLY, for a local testnet's break-it controls: let the control API (with its
    /// token) make this provider's next checkpoint cheat, or its training hang from the next
    /// step (`POST /v1/test/cheat`). Off by default; a node without it refuses the request.
    #[arg(long, env = "GPUCHAIN_TEST_CHEAT_CONTROL")]
    pub test_cheat_control: bool,

    /// TESTING ONLY, for a local testnet's partition faults: let the control API (with its
    /// token) cut this node off from given peers and heal it (`POST /v1/test/partition`).
    /// Off by default; a node without it refuses the request.
    #[arg(long, env = "GPUCHAIN_TEST_PARTITION_CONTROL")]
    pub test_partition_control: bool,

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

// --- the one-shot subcommands (`job`, `provider`, `withdraw`), run by crate::commands

#[derive(Debug, Args, Clone)]
pub struct ChainArgs {
    /// JSON-RPC URL of the chain holding the escrow.
    #[arg(long, env = "GPUCHAIN_RPC_URL", value_name = "URL")]
    pub rpc_url: String,
    /// JobEscrow contract address.
    #[arg(long, env = "GPUCHAIN_ESCROW", value_name = "ADDRESS")]
    pub escrow: String,
    /// Payment token. Default: the escrow's stake token.
    #[arg(long, env = "GPUCHAIN_TOKEN", value_name = "ADDRESS")]
    pub token: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub struct KeyArgs {
    /// The node's data dir (its keystore signs).
    #[arg(long, env = "GPUCHAIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: PathBuf,
    /// File with the keystore password (or set GPUCHAIN_KEYSTORE_PASSWORD).
    #[arg(long, env = "GPUCHAIN_KEYSTORE_PASSWORD_FILE", value_name = "FILE")]
    pub keystore_password_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Submit a job through a running client node: approve, createJob, publish the job's
    /// data as blobs, gossip the offer. Prints the job id.
    Submit(Box<SubmitArgs>),
    /// A job as the escrow records it (and as the client node sees it, when given one).
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job file (TOML): model, steps, checkpoint interval, data, thresholds.
    #[arg(long, value_name = "FILE")]
    pub spec: PathBuf,
    /// Most the job may spend, in tokens (e.g. `5` USDC); the rest is refunded.
    // Negative numbers are taken as values so that they are refused as amounts, not as
    // unknown flags.
    #[arg(long, value_name = "AMOUNT", allow_negative_numbers = true)]
    pub budget: String,
    /// Highest price per step accepted from a provider, in tokens (e.g. `0.003`).
    #[arg(long, value_name = "AMOUNT", allow_negative_numbers = true)]
    pub max_price: String,
    /// How many verifiers the escrow draws from its pool to judge the job (2–32). The client
    /// never picks them: no client can seat verifiers of its own.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub committee: u8,
    /// Votes needed to accept or reject a checkpoint: a strict majority of the committee.
    /// Default: the smallest one.
    #[arg(long)]
    pub quorum: Option<u8>,
    /// What each committee member that signs a decision earns, in tokens (e.g. `0.001`),
    /// out of the budget. Members that vote against the outcome or not at all earn nothing.
    #[arg(long, default_value = "0.001", value_name = "AMOUNT")]
    pub verifier_fee: String,
    /// Seconds from now until the job's deadline.
    #[arg(long, default_value_t = 3600, value_name = "SECS")]
    pub deadline: u64,
    /// Seconds after the deadline before anyone may expire the job and refund it.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub grace: u64,
    #[command(flatten)]
    pub node: NodeRef,
}

/// Which running node to ask: its data dir (the API address and token are read from it) or
/// the address and a token file.
#[derive(Debug, Args, Clone)]
pub struct NodeRef {
    /// Data dir of the running node.
    #[arg(long, env = "GPUCHAIN_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Control API address of the running node (overrides the one in --data-dir).
    #[arg(long, value_name = "ADDR")]
    pub api: Option<std::net::SocketAddr>,
    /// File with the node's API token (default: `<data dir>/api.token`).
    #[arg(long, env = "GPUCHAIN_API_TOKEN_FILE", value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The job id `job submit` printed.
    pub job_id: String,
    #[command(flatten)]
    pub chain: ChainArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Read the job's escrow events from this block on (its creation block or earlier;
    /// RPCs that cap log ranges need it).
    #[arg(long, default_value_t = 0, value_name = "BLOCK")]
    pub from_block: u64,
    /// Optionally, the client node, for its view (phase, last heartbeat step).
    #[command(flatten)]
    pub node: NodeRef,
}

#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Stake tokens so the escrow will assign jobs to this node's key.
    Register(RegisterArgs),
    /// This key's stake and withdrawable balance.
    Status(ProviderStatusArgs),
    /// Leave the live epoch of a job: no slash, its unaccepted steps are not paid.
    Resign(ResignArgs),
    /// Start unbonding part of the stake no live epoch reserves.
    Unbond(UnbondArgs),
    /// Take back unbonded stake once the escrow's delay has passed.
    WithdrawStake(WithdrawArgs),
}

#[derive(Debug, Subcommand)]
pub enum VerifierCommand {
    /// Stake tokens into the escrow's verifier pool: once the stake reaches the escrow's
    /// minimum, committees may be drawn from this key.
    Register(RegisterArgs),
    /// This key's verifier stake, pool seat, fees and record (decisions signed with the
    /// outcome or not).
    Status(ProviderStatusArgs),
    /// Start unbonding verifier stake (below the minimum the key leaves the pool).
    Unbond(UnbondArgs),
    /// Take back unbonded verifier stake once the escrow's delay has passed.
    WithdrawStake(WithdrawArgs),
}

#[derive(Debug, Args)]
pub struct ResignArgs {
    /// The job whose live epoch this key holds.
    pub job_id: String,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
}

#[derive(Debug, Args)]
pub struct UnbondArgs {
    /// Tokens to unbond (e.g. `50`); at most the stake no live epoch reserves.
    #[arg(long, value_name = "AMOUNT")]
    pub amount: String,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// Tokens to stake (e.g. `100`); at least the escrow's minimum stake in total.
    #[arg(long, value_name = "AMOUNT")]
    pub stake: String,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
}

#[derive(Debug, Args)]
pub struct ProviderStatusArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
    #[arg(long)]
    pub json: bool,
    /// Read the escrow's record (the key's epochs or decisions) from this block on (the
    /// escrow's deployment block or earlier; RPCs that cap log ranges need it).
    #[arg(long, default_value_t = 0, value_name = "BLOCK")]
    pub from_block: u64,
}

#[derive(Debug, Args)]
pub struct WithdrawArgs {
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub chain: ChainArgs,
}
