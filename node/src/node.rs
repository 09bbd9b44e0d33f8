//! Starting and stopping a node: data dir, keys, blob endpoint, swarm, control API,
//! signals. The data dir survives a kill -9: keys are written atomically, the blob store
//! (redb) recovers its log, and the lock is an OS file lock that dies with the process.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use tokio::sync::{mpsc, watch};

use crate::blobs::BlobNode;
use crate::config::NodeConfig;
use crate::event_loop::{COMMAND_QUEUE, EventLoop};
use crate::handle::NodeHandle;
use crate::roles::{RoleRuntime, RolesConfig};
use crate::validation::StatelessValidator;

pub const LOCK_FILE: &str = "node.lock";
pub const API_ADDR_FILE: &str = "api.addr";
pub const BLOB_DIR: &str = "blobs";

pub async fn run(config: NodeConfig) -> Result<()> {
    let dir = &config.data_dir;
    prepare_data_dir(dir)?;
    let _lock = lock_data_dir(dir)?;
    let _ = fs::remove_file(dir.join(API_ADDR_FILE));

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
        &dir.join(BLOB_DIR),
        keys.iroh.clone(),
        config.blob_bind,
        config.relay.clone(),
    )
    .await?;
    let swarm = crate::behaviour::build_swarm(keys.libp2p.clone())?;

    let (cmd_tx, cmd_rx) = mpsc::channel(COMMAND_QUEUE);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let handle = NodeHandle::new(cmd_tx, blobs.clone(), shutdown_tx);
    let mut event_loop = EventLoop::new(
        swarm,
        blobs.clone(),
        StatelessValidator { domain },
        cmd_rx,
        shutdown_rx.clone(),
        &config,
        eth_key.clone(),
    );
    event_loop.start(&config)?;

    if let Some(chain) = chain {
        let (follower, history) = crate::roles::chain::open_follower(&chain, dir).await?;
        tracing::info!(target: "gpuchain::event", event = "chain_connected", chain_id = domain.chain_id, escrow = %domain.escrow, token = %chain.token(), replayed_events = history.len(), "chain connected");
        let roles_config = RolesConfig {
            roles: config.roles.clone(),
            data_dir: dir.clone(),
            key: eth_key,
            chain,
            heartbeat_period: config.heartbeat_period,
            detector_timeout: config.detector_timeout,
            price_per_step: config.price_per_step,
            fault: config.fault,
            verifier_seed: rand::random(),
        };
        if let Some(fault) = config.fault {
            tracing::warn!(target: "gpuchain::event", event = "fault_enabled", fault = ?fault, "TESTING: this provider will cheat ({fault:?}) and should be refused and slashed");
        }
        let (runtime, tx) = RoleRuntime::new(
            roles_config,
            handle.clone(),
            history.iter().map(|e| e.history_entry()).collect(),
            shutdown_rx.clone(),
        );
        event_loop.attach_roles(tx.clone());
        handle.attach_roles(tx.clone());
        tokio::spawn(crate::roles::chain::follow(
            follower,
            tx,
            shutdown_rx.clone(),
        ));
        tokio::spawn(async move {
            if let Err(e) = runtime.run().await {
                tracing::error!(target: "gpuchain::event", event = "roles_failed", error = %format!("{e:#}"), "role runtime stopped");
            }
        });
    }

    tracing::info!(
        target: "gpuchain::event",
        event = "started",
        peer_id = %peer_id,
        eth_address = %eth_address,
        blob_endpoint = %hex::encode(blobs.id().as_bytes()),
        roles = ?config.roles,
        "node started"
    );

    if let Some(addr) = config.api {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow!("cannot bind the control API on {addr}: {e}"))?;
        let bound = listener.local_addr()?;
        write_atomically(&dir.join(API_ADDR_FILE), bound.to_string().as_bytes())?;
        tracing::info!(target: "gpuchain::event", event = "api_listening", addr = %bound, "control API listening");
        tokio::spawn(crate::api::serve(listener, handle.clone()));
    }

    let signals = handle.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!(target: "gpuchain::event", event = "signal", "shutting down on signal");
        signals.shutdown();
    });

    let result = event_loop.run(config.bootstrap_timeout).await;
    blobs.shutdown().await;
    let _ = fs::remove_file(dir.join(API_ADDR_FILE));
    result
}

async fn connect_chain(
    config: &NodeConfig,
    key: alloy_signer_local::PrivateKeySigner,
) -> Result<gpuchain_contracts::chain::ChainClient> {
    let rpc_url = config
        .rpc_url
        .as_deref()
        .ok_or_else(|| anyhow!("roles need --rpc-url"))?;
    crate::commands::connect_to(rpc_url, config.escrow_domain.escrow, config.token, key).await
}

fn prepare_data_dir(dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!(
            "data dir {} exists but is not a directory; pass --data-dir with a directory path",
            dir.display()
        );
    }
    fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create data dir {}: check that its parent exists and is writable",
            dir.display()
        )
    })?;
    Ok(())
}

fn lock_data_dir(dir: &Path) -> Result<fs::File> {
    let path = dir.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| {
            format!(
                "cannot write to data dir {}: check its permissions (the node needs to create files in it)",
                dir.display()
            )
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => bail!(
            "data dir {} is in use by another gpuchain node; stop it or pick another --data-dir",
            dir.display()
        ),
        Err(fs::TryLockError::Error(e)) => Err(anyhow!("cannot lock {}: {e}", path.display())),
    }
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
