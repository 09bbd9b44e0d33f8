//! The dashboard of a local testnet: the network's view (every node's events as they are
//! logged, what the harness does, each node's stake and state) served by the harness itself,
//! with the break-it controls acting on the real processes. The feed is built from the node
//! logs, the same lines the run record is later written from, so the live page and a replay
//! of the record show the same run.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use alloy::primitives::Address;
use anyhow::{Context, Result};
use futures::future::BoxFuture;
use gpuchain_api::ApiClient;
use gpuchain_contracts::chain::ChainClient;
use gpuchain_web::{
    Access, Beat, BreakAction, BreakRequest, Controls, Dashboard, Feed, Mode, Target,
};
use serde_json::{Value, json};

use crate::events::{LogTail, Logged, NodeEvent, unix_micros};
use crate::node::NodeProc;
use crate::process::{self, Signal};
use crate::record::{HARNESS, HarnessEvent, RecordLine, Recorded};

/// The file in the run folder holding the dashboard's token.
pub const TOKEN_FILE: &str = "dashboard.token";
/// How often the node logs are read for new lines.
const TAIL_EVERY: Duration = Duration::from_millis(100);
/// How often stakes and process states are read.
const STATUS_EVERY: Duration = Duration::from_secs(2);

/// A node as the board knows it: where its log is, how to reach it.
struct Watched {
    log: LogTail,
    pid: u32,
    roles: Vec<String>,
    api: ApiClient,
    eth: Address,
    cheat_control: bool,
    /// What the controls last did to it: running, frozen, killed, stopped.
    state: &'static str,
    /// The last status pushed, to push only changes.
    last_status: Option<(Option<String>, &'static str)>,
}

/// The harness's side of the dashboard: what it watches, the feed it fills, the lines it
/// adds itself (kept for the run record). Clones share all of it.
#[derive(Clone)]
pub struct Board {
    feed: Arc<Feed>,
    nodes: Arc<Mutex<BTreeMap<String, Watched>>>,
    harness_lines: Arc<Mutex<Vec<RecordLine>>>,
    chain: Option<ChainClient>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Board")
            .field("nodes", &nodes.keys().collect::<Vec<_>>())
            .field("feed_lines", &self.feed.len())
            .finish()
    }
}

impl Board {
    pub fn new(chain: Option<ChainClient>) -> Self {
        Self {
            feed: Feed::new(),
            nodes: Arc::default(),
            harness_lines: Arc::default(),
            chain,
        }
    }

    pub fn feed(&self) -> Arc<Feed> {
        self.feed.clone()
    }

    /// Starts (or, after a restart, resumes) watching `node`; its log is read from where it
    /// was left, so nothing is shown twice.
    pub fn watch(&self, node: &NodeProc) {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let log = nodes.get(node.name()).map_or_else(
            || LogTail::new(node.log_path()),
            |w| w.log.moved_to(node.log_path()),
        );
        nodes.insert(
            node.name().to_string(),
            Watched {
                log,
                pid: node.pid(),
                roles: node.spec().roles.clone(),
                api: node.api().clone(),
                eth: node.eth_address(),
                cheat_control: node.args().iter().any(|a| a == "--test-cheat-control"),
                state: "running",
                last_status: None,
            },
        );
    }

    /// A line of the harness's own, shown live and kept for the run record.
    pub fn harness(&self, event: HarnessEvent) {
        self.harness_at(event, SystemTime::now());
    }

    /// [`Board::harness`] for something done at `at` (a kill is stamped with the moment
    /// before its signal, not when it was written down, so times to notice are not short).
    pub fn harness_at(&self, event: HarnessEvent, at: SystemTime) {
        let line = RecordLine {
            node: HARNESS.into(),
            timestamp_us: unix_micros(at).unwrap_or_default(),
            event: Recorded::Harness(event),
        };
        self.feed.push(&line, line.timestamp_us, None);
        self.harness_lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }

    /// The harness's lines so far, for [`crate::record::write_record`].
    pub fn harness_lines(&self) -> Vec<RecordLine> {
        self.harness_lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads every watched log from where it was left and feeds the new events, all nodes'
    /// together in time order.
    pub fn tail_once(&self) {
        let mut batch: Vec<(String, Logged)> = Vec::new();
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, w) in nodes.iter_mut() {
            batch.extend(w.log.read_new().into_iter().map(|l| (name.clone(), l)));
        }
        drop(nodes);
        batch.sort_by_key(|(_, l)| l.at);
        for (name, logged) in batch {
            push_node_line(&self.feed, &name, logged);
        }
    }

    /// Each node's stake (from the chain) and state, pushed where it changed.
    pub async fn status_once(&self) {
        let watched: Vec<(String, Address, Vec<String>)> = {
            let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
            nodes
                .iter()
                .map(|(n, w)| (n.clone(), w.eth, w.roles.clone()))
                .collect()
        };
        for (name, eth, roles) in watched {
            let stake = match &self.chain {
                Some(c) if roles.iter().any(|r| r == "provider") => {
                    c.stake_of(eth).await.ok().map(|s| s.bonded.to_string())
                }
                Some(c) if roles.iter().any(|r| r == "verifier") => c
                    .verifier_stake_of(eth)
                    .await
                    .ok()
                    .map(|s| s.bonded.to_string()),
                _ => None,
            };
            let changed = {
                let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(w) = nodes.get_mut(&name) else {
                    continue;
                };
                let alive = process::pid_alive(w.pid);
                if !alive && w.state == "running" {
                    w.state = "exited";
                }
                let now = (stake.clone(), w.state);
                let changed = w.last_status.as_ref() != Some(&now);
                w.last_status = Some(now);
                changed.then_some(w.state)
            };
            if let Some(state) = changed {
                self.harness(HarnessEvent::NodeStatus {
                    target_node: name,
                    stake,
                    state: state.to_string(),
                });
            }
        }
    }
}

/// One node event as a record line in the feed; heartbeats marked as such.
fn push_node_line(feed: &Feed, node: &str, logged: Logged) {
    let Ok(timestamp_us) = logged.micros() else {
        return;
    };
    let beat = match &logged.event {
        NodeEvent::Heartbeat { provider, step, .. } => Some(Beat {
            key: provider.clone(),
            step: *step,
        }),
        _ => None,
    };
    let line = RecordLine {
        node: node.to_string(),
        timestamp_us,
        event: Recorded::Node(logged.event),
    };
    feed.push(&line, timestamp_us, beat);
}

impl Controls for Board {
    fn targets(&self) -> Vec<Target> {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes
            .iter()
            .filter(|(_, w)| matches!(w.state, "running" | "frozen"))
            .filter_map(|(name, w)| {
                let provider = w.roles.iter().any(|r| r == "provider");
                let verifier = w.roles.iter().any(|r| r == "verifier");
                if !provider && !verifier {
                    return None;
                }
                let mut actions = if w.state == "frozen" {
                    vec![BreakAction::Thaw, BreakAction::Kill]
                } else {
                    vec![BreakAction::Kill, BreakAction::Freeze]
                };
                if w.state == "running" {
                    if provider && w.cheat_control {
                        actions.extend([
                            BreakAction::CheatJunk,
                            BreakAction::CheatStale,
                            BreakAction::CheatNan,
                            BreakAction::Hang,
                        ]);
                    }
                    if verifier {
                        actions.push(BreakAction::Stop);
                    }
                }
                Some(Target {
                    node: name.clone(),
                    roles: w.roles.clone(),
                    actions,
                })
            })
            .collect()
    }

    fn act(&self, req: BreakRequest) -> BoxFuture<'static, Result<String, String>> {
        let found = {
            let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
            nodes
                .get(&req.node)
                .map(|w| (w.pid, w.api.clone(), w.state))
        };
        let offered = self
            .targets()
            .into_iter()
            .any(|t| t.node == req.node && t.actions.contains(&req.action));
        let board = self.clone();
        Box::pin(async move {
            let Some((pid, api, _)) = found else {
                return Err(format!("no node named {:?} in this testnet", req.node));
            };
            if !offered {
                return Err(format!(
                    "{:?} cannot be done to {} now (see the buttons the page offers)",
                    req.action, req.node
                ));
            }
            let at = SystemTime::now();
            let (done, state) = match req.action {
                BreakAction::Kill => (signal(pid, Signal::Kill, "killed (kill -9)")?, "killed"),
                BreakAction::Freeze => (signal(pid, Signal::Stop, "frozen (SIGSTOP)")?, "frozen"),
                BreakAction::Thaw => (signal(pid, Signal::Cont, "thawed (SIGCONT)")?, "running"),
                BreakAction::Stop => (signal(pid, Signal::Term, "stopped (SIGTERM)")?, "stopped"),
                BreakAction::Hang => {
                    api.post::<_, Value>("/v1/test/cheat", &json!({ "fault": "hang" }))
                        .await
                        .map_err(|e| format!("{e}"))?;
                    (
                        "its training stops at the next step; heartbeats go on".to_string(),
                        "running",
                    )
                }
                BreakAction::CheatJunk | BreakAction::CheatStale | BreakAction::CheatNan => {
                    let fault = match req.action {
                        BreakAction::CheatJunk => "junk",
                        BreakAction::CheatStale => "stale",
                        _ => "nan",
                    };
                    api.post::<_, Value>("/v1/test/cheat", &json!({ "fault": fault }))
                        .await
                        .map_err(|e| format!("{e}"))?;
                    (format!("its next checkpoint will be {fault}"), "running")
                }
            };
            {
                let mut nodes = board.nodes.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(w) = nodes.get_mut(&req.node) {
                    w.state = state;
                }
            }
            board.harness_at(
                HarnessEvent::Break {
                    action: req.action,
                    target_node: req.node.clone(),
                },
                at,
            );
            Ok(format!("{}: {done}", req.node))
        })
    }
}

fn signal(pid: u32, sig: Signal, what: &str) -> Result<String, String> {
    process::signal(pid, sig).map_err(|e| format!("{e:#}"))?;
    Ok(what.to_string())
}

/// The dashboard server of a testnet, running until dropped.
pub struct DashboardServer {
    pub addr: SocketAddr,
    pub token: String,
    pub board: Board,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl DashboardServer {
    /// The page's address with the token in its fragment (never sent over the wire).
    pub fn url(&self) -> String {
        format!("http://{}/dashboard/#token={}", self.addr, self.token)
    }

    /// The page's address without the token: the views only.
    pub fn view_url(&self) -> String {
        format!("http://{}/dashboard/", self.addr)
    }
}

impl Drop for DashboardServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Serves `board`'s dashboard on loopback, the token in `<run dir>/dashboard.token`.
pub async fn serve(board: Board, run_dir: &Path, title: &str) -> Result<DashboardServer> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind the dashboard on loopback")?;
    let addr = listener.local_addr()?;
    let token = hex_token();
    let token_path = run_dir.join(TOKEN_FILE);
    std::fs::write(&token_path, &token)
        .with_context(|| format!("cannot write {}", token_path.display()))?;
    let controls: Arc<dyn Controls> = Arc::new(board.clone());
    let dashboard = Arc::new(Dashboard {
        feed: board.feed(),
        mode: Mode::Live,
        title: title.to_string(),
        controls: Some(controls),
    });
    let access = Access::new(token.clone(), addr, token_path.display().to_string());
    let app = gpuchain_web::dashboard::router(dashboard, access);
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("[dashboard] stopped: {e}");
        }
    });
    let tail_board = board.clone();
    let tail = tokio::spawn(async move {
        let mut every = tokio::time::interval(TAIL_EVERY);
        loop {
            every.tick().await;
            let b = tail_board.clone();
            // File reads off the async threads.
            let _ = tokio::task::spawn_blocking(move || b.tail_once()).await;
        }
    });
    let status_board = board.clone();
    let status = tokio::spawn(async move {
        let mut every = tokio::time::interval(STATUS_EVERY);
        loop {
            every.tick().await;
            status_board.status_once().await;
        }
    });
    Ok(DashboardServer {
        addr,
        token,
        board,
        tasks: vec![server, tail, status],
    })
}

fn hex_token() -> String {
    use rand08::RngCore;
    let mut b = [0u8; 32];
    rand08::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Where a run's record is: the file itself, or the run folder holding `record.jsonl`.
pub fn record_path(given: &Path) -> PathBuf {
    if given.is_dir() {
        given.join(crate::record::RECORD_FILE)
    } else {
        given.to_path_buf()
    }
}

/// Serves a replay of the recorded run at `record` (a `record.jsonl` or its run folder) on
/// `listen` until the returned task ends; every line is typed on the way in, so a file that
/// is not a run record is refused here, naming its bad line.
pub async fn serve_replay(
    record: &Path,
    listen: SocketAddr,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let path = record_path(record);
    let lines = crate::record::read_record(&path)?;
    if lines.is_empty() {
        anyhow::bail!("{} holds no events: nothing to replay", path.display());
    }
    let feed = Feed::new();
    for l in &lines {
        feed.push(l, l.timestamp_us, None);
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (pick another with --listen)"))?;
    let addr = listener.local_addr()?;
    let dashboard = Arc::new(Dashboard {
        feed,
        mode: Mode::Replay,
        // The run folder's name and the file: enough to tell runs apart, no machine paths.
        title: format!(
            "replay of {}",
            path.components()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<PathBuf>()
                .display()
        ),
        controls: None,
    });
    // A replay only shows; its token guards nothing anyone needs, so it is never printed.
    let access = Access::new(hex_token(), addr, "(a replay has no controls)");
    let app = gpuchain_web::dashboard::router(dashboard, access);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("[dashboard] stopped: {e}");
        }
    });
    Ok((addr, task))
}
