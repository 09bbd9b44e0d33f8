//! Starting and stopping a node: data dir, keys, blob endpoint, swarm, control API,
//! signals. The data dir survives a kill -9: keys are written atomically, the blob store
//! (redb) recovers its log, and the lock is an OS file lock that dies with the process.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use gpuchain_contracts::chain::ChainClient;
use tokio::sync::{mpsc, watch};

use crate::blobs::BlobNode;
use crate::config::NodeConfig;
use crate::datadir::DataDir;
use crate::event_loop::{COMMAND_QUEUE, EventLoop};
use crate::events::NodeEvent;
use crate::handle::NodeHandle;
use crate::inbound::INBOUND_QUEUE;
use crate::roles::{RoleRuntime, RolesConfig};
use crate::validation::StatelessValidator;
use std::sync::Arc;

pub use crate::datadir::{API_ADDR_FILE, BLOB_DIR, LOCK_FILE};

pub async fn run(config: NodeConfig) -> Result<()> {
    // Before any kernel runs, so candle's threads yield to the network's.
    crate::compute::init();
    // A client serves the dashboard of its jobs: keep its events from the first one on.
    if config.roles.contains(&crate::cli::Role::Client) && config.api.is_some() {
        crate::events::keep_for_dashboard();
    }
    let dir = &config.data_dir;
    let data_dir = Arc::new(DataDir::prepare(
        dir,
        config.blob_import_dir.as_deref(),
        config.blob_export_dir.as_deref(),
        config.keystore_password_file.iter().cloned().collect(),
    )?);
    let _lock = data_dir.lock()?;
    let _ = fs::remove_file(data_dir.api_addr_file());
    // Before anything binds: a busy port is a configuration error, not something to share.
    crate::ports::check_free(&config.listen, config.blob_bind, config.api)?;

    let password = config.keystore_password()?;
    let keys = crate::keys::load_or_create(dir, &password)?;
    drop(password);
    let peer_id = keys.libp2p.public().to_peer_id();
    let eth_address = keys.eth.address().to_string();
    let eth_key = keys.protocol_signer()?;

    // The chain first: its id and the escrow fix the domain every signature is checked in,
    // and a node with roles is useless without it.
    let chain = if config.roles.is_empty() {
        None
    } else {
        Some(connect_chain(&config, keys.eth.clone()).await?)
    };
    let domain = chain.as_ref().map_or(config.escrow_domain, |c| c.domain());
    if config.chain_id_given && domain.chain_id != config.escrow_domain.chain_id {
        bail!(
            "--chain-id {} does not match the chain at the RPC URL (id {}); drop the flag or fix the URL",
            config.escrow_domain.chain_id,
            domain.chain_id
        );
    }

    let blobs = BlobNode::start(
        &data_dir.blobs(),
        keys.iroh.clone(),
        config.blob_bind,
        config.relay.clone(),
        config.max_blob_bytes,
    )
    .await?;
    let swarm = crate::behaviour::build_swarm(keys.libp2p.clone())?;

    let (cmd_tx, cmd_rx) = mpsc::channel(COMMAND_QUEUE);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let handle = NodeHandle::new(cmd_tx, blobs.clone(), shutdown_tx);
    let cheat = config
        .test_cheat_control
        .then(|| Arc::new(crate::roles::ctx::CheatSwitch::default()));
    // The roles first: the event loop is built knowing where to send what they must see.
    let (roles, inbound) = match chain {
        None => (None, None),
        Some(chain) => {
            let (follower, history) = crate::roles::chain::open_follower(&chain, dir).await?;
            crate::events::emit(
                NodeEvent::ChainConnected {
                    chain_id: domain.chain_id,
                    escrow: domain.escrow.to_string(),
                    token: (chain.token()).to_string(),
                    replayed_events: history.len(),
                },
                "chain connected",
            );
            let vetting = provider_vetting(&config, &chain, eth_key.address()).await?;
            let stake_chain = chain.clone();
            let roles_config = RolesConfig {
                roles: config.roles.clone(),
                data_dir: dir.clone(),
                key: eth_key.clone(),
                chain,
                heartbeat_period: config.heartbeat_period,
                detector_timeout: config.detector_timeout,
                detector_floor: config.detector_floor,
                price_per_step: config.price_per_step,
                hardware: crate::hardware::local(config.memory_bytes),
                vetting,
                fault: config.fault,
                cheat: cheat.clone(),
                verifier_seed: rand::random(),
            };
            if let Some(fault) = config.fault {
                crate::events::emit(
                    NodeEvent::FaultEnabled {
                        fault: format!("{:?}", fault),
                    },
                    &match fault.role() {
                        crate::cli::Role::Verifier => format!(
                            "TESTING: this verifier will vote reject on everything ({fault:?}); a quorum must outvote it"
                        ),
                        crate::cli::Role::Client => format!(
                            "TESTING: this client will withhold pay ({fault:?}): it ends each epoch instead of landing its accepts"
                        ),
                        crate::cli::Role::Provider
                            if fault == crate::cli::Fault::CrashMidCheckpoint =>
                        {
                            format!(
                                "TESTING: this provider will crash while it writes a checkpoint ({fault:?})"
                            )
                        }
                        crate::cli::Role::Provider if fault == crate::cli::Fault::Hang => format!(
                            "TESTING: this provider's training will hang ({fault:?}) while it heartbeats; clients should call it stalled and fail over"
                        ),
                        crate::cli::Role::Provider => format!(
                            "TESTING: this provider will cheat ({fault:?}) and should be refused and slashed"
                        ),
                    },
                );
            }
            let (inbound_tx, inbound_rx) = mpsc::channel(INBOUND_QUEUE);
            let (runtime, roles) = RoleRuntime::new(
                roles_config,
                handle.clone(),
                history.iter().map(|e| e.history_entry()).collect(),
                inbound_rx,
                shutdown_rx.clone(),
            );
            tokio::spawn(crate::roles::chain::follow(
                follower,
                roles.sender(),
                shutdown_rx.clone(),
            ));
            if config.roles.contains(&crate::cli::Role::Provider) {
                tokio::spawn(crate::roles::chain::watch_stake(
                    stake_chain,
                    eth_key.address(),
                    roles.sender(),
                    shutdown_rx.clone(),
                ));
            }
            tokio::spawn(async move {
                if let Err(e) = runtime.run().await {
                    crate::events::emit(
                        NodeEvent::RolesFailed {
                            error: format!("{e:#}"),
                        },
                        "role runtime stopped",
                    );
                }
            });
            (Some(roles), Some(inbound_tx))
        }
    };
    let mut event_loop = EventLoop::new(
        swarm,
        blobs.clone(),
        StatelessValidator { domain },
        cmd_rx,
        shutdown_rx.clone(),
        &config,
        eth_key,
        inbound,
    );
    event_loop.start(&config)?;

    crate::events::emit(
        NodeEvent::Started {
            peer_id: peer_id.to_string(),
            eth_address: eth_address.to_string(),
            blob_endpoint: (hex::encode(blobs.id().as_bytes())).to_string(),
            roles: config
                .roles
                .iter()
                .map(|r| format!("{r:?}").to_lowercase())
                .collect(),
        },
        "node started",
    );

    if let Some(addr) = config.api {
        let token = gpuchain_api::auth::load_or_create_token(dir).map_err(|e| {
            anyhow!(
                "cannot create the API token {}: {e}",
                gpuchain_api::auth::token_path(dir).display()
            )
        })?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow!("cannot bind the control API on {addr}: {e}"))?;
        let bound = listener.local_addr()?;
        // The token is in place before the address: a caller that sees api.addr can read both.
        write_atomically(&data_dir.api_addr_file(), bound.to_string().as_bytes())?;
        crate::events::emit(
            NodeEvent::ApiListening {
                addr: bound.to_string(),
                token_file: (gpuchain_api::auth::token_path(dir).display()).to_string(),
            },
            "control API listening",
        );
        let access = gpuchain_web::Access::new(
            token,
            bound,
            format!("<data dir>/{}", gpuchain_api::auth::TOKEN_FILE),
        )
        .on_refuse(|status, reason| {
            crate::events::emit(
                NodeEvent::ApiRefused {
                    status,
                    reason: reason.to_string(),
                },
                "control API request refused",
            );
        });
        tokio::spawn(crate::api::serve(
            listener,
            handle.clone(),
            roles,
            data_dir.clone(),
            cheat,
            config.test_partition_control,
            access,
        ));
    }

    let signals = handle.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        crate::events::emit(NodeEvent::Signal, "shutting down on signal");
        signals.shutdown();
    });

    let result = event_loop.run(config.bootstrap_timeout).await;
    blobs.shutdown().await;
    let _ = fs::remove_file(data_dir.api_addr_file());
    result
}

async fn connect_chain(
    config: &NodeConfig,
    key: alloy_signer_local::PrivateKeySigner,
) -> Result<ChainClient> {
    let rpc_url = config
        .rpc_url
        .as_deref()
        .ok_or_else(|| anyhow!("roles need --rpc-url"))?;
    Ok(
        ChainClient::connect_paying_in(rpc_url, config.escrow_domain.escrow, config.token, key)
            .await?,
    )
}

/// The provider's vetting rules: the configured limits, the tokens it takes (by default
/// the escrow's stake token), and its bonded stake as the chain says now, which the machine
/// then follows through its own assignments and slashes.
async fn provider_vetting(
    config: &NodeConfig,
    chain: &ChainClient,
    me: gpuchain_protocol::Address,
) -> Result<gpuchain_protocol::provider::Vetting> {
    use gpuchain_protocol::provider::{StakeBudget, Vetting};
    if !config.roles.contains(&crate::cli::Role::Provider) {
        return Ok(Vetting::default());
    }
    let tokens = if config.accept_tokens.is_empty() {
        vec![chain.stake_token().await?]
    } else {
        config.accept_tokens.clone()
    };
    let stake = chain.stake_of(me).await?;
    let min_stake = chain.min_stake().await?;
    Ok(Vetting {
        tokens,
        max_duration_secs: config.max_job_duration_secs,
        max_grace_secs: config.max_grace_secs,
        stake: Some(StakeBudget {
            bonded: stake.bonded,
            min_stake,
        }),
    })
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
