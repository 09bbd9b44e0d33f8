//! The harness against real processes: anvil with the deployed contracts, three plain
//! `gpuchain node`s on loopback, funding read back to the unit, kill -9, pause/resume,
//! restart, events from the JSON logs, teardown without survivors, and the errors a missing
//! binary or a node that cannot start give.
//!
//! Needs the `gpuchain` binary of the same target dir and profile (`cargo build -p
//! gpuchain-node`), or `GPUCHAIN_BIN`.

use std::time::{Duration, SystemTime};

use anyhow::{Result, ensure};
use gpuchain_testnet::{
    Chain, ChainOpts, ETH, NodeEvent, NodeSpec, PrivateKeySigner, Testnet, U256, USDC, after,
    binary, event_is, pid_alive, poll_until,
};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn three_nodes_on_a_chain_faults_and_teardown() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let t0 = SystemTime::now();
    let mut net = Testnet::with_new_chain(dir.path(), binary()?, ChainOpts::default()).await?;
    let chain = net.chain()?;
    assert_eq!(chain.chain_id(), 31337);
    assert_ne!(chain.escrow(), chain.usdc());
    assert!(dir.path().join("anvil.log").is_file());

    // Funding lands to the unit: ETH is set, USDC is minted.
    let someone = PrivateKeySigner::random().address();
    let eth = U256::from(3 * ETH + 7);
    let usdc = U256::from(250 * USDC + 1);
    chain.fund(someone, eth, usdc).await?;
    assert_eq!(chain.eth_balance(someone).await?, eth);
    assert_eq!(chain.usdc_balance(someone).await?, usdc);
    assert_eq!(chain.withdrawable(someone).await?, U256::ZERO);
    assert_eq!(chain.escrow_usdc_balance().await?, U256::ZERO);

    // Three plain nodes; b and c bootstrap from a. a is funded through its spec (without
    // chain flags, which the node does not take yet) and stakes with its own key.
    let a = net
        .spawn(NodeSpec::new("a").funded(U256::from(ETH), U256::from(150 * USDC)))
        .await?;
    let a_key = a.signer().clone();
    assert_eq!(
        a.status().await?["eth_address"],
        a.eth_address().to_string()
    );
    net.spawn(NodeSpec::new("b")).await?;
    net.spawn(NodeSpec::new("c")).await?;
    let a = net.node("a")?;
    assert!(net.node("b")?.args().contains(&a.listen_addr().to_string()));

    let staker = net.chain()?.client(a_key).await?;
    staker.register(U256::from(100 * USDC)).await?;
    let chain = net.chain()?;
    assert_eq!(
        chain.stake_of(a.eth_address()).await?.bonded,
        U256::from(100 * USDC)
    );
    assert_eq!(chain.escrow_usdc_balance().await?, U256::from(100 * USDC));
    assert_eq!(
        chain.usdc_balance(a.eth_address()).await?,
        U256::from(50 * USDC)
    );

    poll_until("a connected to b and c", WAIT, async || {
        Ok(a.connected_peers().await? >= 2)
    })
    .await?;
    let peers = a.peers().await?;
    for other in ["b", "c"] {
        let id = net.node(other)?.peer_id();
        ensure!(
            peers.iter().any(|p| p["peer_id"] == id),
            "a does not list {other}: {peers:?}"
        );
    }

    // Events come back from the JSON log typed, with the time the node wrote them.
    let (at, peer_id) = net
        .wait_for(
            "b",
            |e| match &e.event {
                NodeEvent::Started { peer_id, .. } => Some((e.at, peer_id.clone())),
                _ => None,
            },
            WAIT,
        )
        .await?;
    assert_eq!(peer_id, net.node("b")?.peer_id());
    assert!(at >= t0 && at <= SystemTime::now(), "started at {at:?}");
    let boot = net.wait_event("b", event_is!(Bootstrapped), WAIT).await?;
    assert!(boot.at >= at);
    assert!(net.node("a")?.events()?.iter().any(event_is!(Listening)));

    // kill -9: c is gone, a and b still answer.
    let c_pid = net.node("c")?.pid();
    let killed_at = net.kill9("c")?;
    assert!(killed_at >= t0);
    assert!(!pid_alive(c_pid), "c ({c_pid}) survived SIGKILL");
    assert!(!net.node("c")?.is_running());
    assert!(net.kill9("c").is_err(), "killing a dead node is an error");
    net.node("a")?.status().await?;
    net.node("b")?.status().await?;
    poll_until("a notices c is gone", WAIT, async || {
        Ok(net.node("a")?.connected_peers().await? == 1)
    })
    .await?;

    // SIGSTOP: b stops answering but stays alive; SIGCONT brings it back.
    net.pause("b")?;
    let b = net.node("b")?;
    let frozen = tokio::time::timeout(
        Duration::from_millis(500),
        b.request("GET", "/v1/status", None),
    )
    .await;
    assert!(frozen.is_err(), "a paused node answered: {frozen:?}");
    assert!(pid_alive(b.pid()));
    net.resume("b")?;
    net.node("b")?.status().await?;

    // Restart keeps the identity and rejoins through a running node.
    let c_peer = net.node("c")?.peer_id().to_string();
    let c = net.restart("c").await?;
    assert_eq!(c.peer_id(), c_peer);
    assert_ne!(c.pid(), c_pid);
    let c_started = c.started_at();
    poll_until("c rejoined", WAIT, async || {
        Ok(net.node("c")?.connected_peers().await? >= 1)
    })
    .await?;
    let rejoined = net
        .wait_event("c", after(c_started, event_is!(Bootstrapped)), WAIT)
        .await?;
    assert!(rejoined.at >= c_started);
    // Its log holds both runs: two "started" events.
    let starts = net
        .node("c")?
        .events()?
        .iter()
        .filter(|e| event_is!(Started)(e))
        .count();
    assert_eq!(starts, 2);

    // SIGTERM stops cleanly.
    let status = net.stop("b").await?;
    assert!(status.success(), "b exited with {status}");

    // stop_all ends the rest cleanly; a second call has nothing to do.
    net.restart("b").await?;
    net.stop_all().await;
    assert_eq!(net.pids(), vec![net.chain()?.pid()], "only anvil is left");
    net.stop_all().await;
    for name in ["a", "b", "c"] {
        net.restart(name).await?;
    }

    // Drop: nothing survives.
    let pids = net.pids();
    assert_eq!(pids.len(), 4, "three nodes and anvil run: {pids:?}");
    drop(net);
    for pid in pids {
        assert!(!pid_alive(pid), "{pid} survived the teardown");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_binary_is_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("no-such-gpuchain");
    let mut net = Testnet::new(dir.path(), &missing)?;
    let err = net.spawn(NodeSpec::new("a")).await.expect_err("no binary");
    let msg = format!("{err:#}");
    assert!(msg.contains("no-such-gpuchain"), "{msg}");
    assert!(msg.contains("cargo build -p gpuchain`"), "{msg}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_cannot_start_quotes_its_log() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut net = Testnet::new(dir.path(), binary()?)?;
    let err = net
        .spawn(NodeSpec::new("bad").arg("--no-such-flag"))
        .await
        .expect_err("bad flag");
    let msg = format!("{err:#}");
    assert!(msg.contains("node bad exited during startup"), "{msg}");
    // clap's complaint, from the log tail
    assert!(msg.contains("--no-such-flag"), "{msg}");

    // A config error the node itself reports after parsing.
    let err = net
        .spawn(NodeSpec::new("bad2").arg("--heartbeat-period-ms").arg("0"))
        .await
        .expect_err("zero heartbeat period");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("--heartbeat-period-ms must be at least 1"),
        "{msg}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn chain_alone_starts_and_dies_with_its_handle() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let chain = Chain::start(dir.path(), ChainOpts::default()).await?;
    let pid = chain.pid();
    assert!(pid_alive(pid));
    assert_eq!(chain.dev_keys().len(), 10);
    assert_eq!(
        chain.deployer().address(),
        chain.dev_keys()[0].address(),
        "the first dev key deploys"
    );
    let block = chain.rpc("eth_blockNumber", serde_json::json!([])).await?;
    assert!(
        block.as_str().is_some_and(|b| b.starts_with("0x")),
        "{block}"
    );
    drop(chain);
    assert!(!pid_alive(pid), "anvil survived its Chain");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_test_leaves_no_process_behind() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().to_path_buf();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut net =
            Testnet::with_new_chain(&path, binary().expect("binary"), ChainOpts::default())
                .await
                .expect("testnet");
        net.spawn(NodeSpec::new("a")).await.expect("a");
        net.spawn(NodeSpec::new("b")).await.expect("b");
        net.pause("b").expect("pause");
        tx.send(net.pids()).expect("send pids");
        panic!("the test failed while its testnet ran");
    });
    let pids = rx.await?;
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert!(task.await.expect_err("the task panicked").is_panic());
    for pid in pids {
        assert!(!pid_alive(pid), "{pid} survived a panic");
    }
    Ok(())
}

/// The chain flags reach the node: only once the binary takes `--rpc-url` (it is being
/// added); before that this test says so and passes.
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_wired_node_starts_funded() -> Result<()> {
    let bin = binary()?;
    let help = std::process::Command::new(&bin)
        .args(["node", "--help"])
        .output()?;
    if !String::from_utf8_lossy(&help.stdout).contains("--rpc-url") {
        eprintln!("{} has no --rpc-url yet: skipping", bin.display());
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let mut net = Testnet::with_new_chain(dir.path(), bin, ChainOpts::default()).await?;
    net.spawn(NodeSpec::new("wired").on_chain()).await?;
    let node = net.node("wired")?;
    let chain = net.chain()?;
    assert!(node.args().contains(&chain.rpc_url().to_string()));
    assert_eq!(
        chain.eth_balance(node.eth_address()).await?,
        U256::from(10 * ETH)
    );
    assert_eq!(
        chain.usdc_balance(node.eth_address()).await?,
        U256::from(1_000 * USDC)
    );
    node.status().await?;
    Ok(())
}
