//! A machine's transaction sent while the chain RPC is away: the plain `submit` reports the
//! outage at once, `submit_through_outage` waits for the RPC and returns the chain's own
//! answer, and nothing is sent while it cannot be reached. Real anvil, the contracts, and the
//! harness's RPC proxy cutting every connection.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use gpuchain_contracts::chain::{ChainConfig, ChainError, RetryPolicy};
use gpuchain_protocol::chain::ChainTx;
use gpuchain_protocol::retry::CHAIN_OUTAGE;
use gpuchain_testnet::{Address, Chain, ChainClient, ChainOpts};
use serde_json::json;

async fn nonce(chain: &Chain, who: Address) -> Result<u64> {
    let v = chain
        .rpc("eth_getTransactionCount", json!([who, "pending"]))
        .await?;
    let hex = v.as_str().context("a transaction count is a hex string")?;
    Ok(u64::from_str_radix(hex.trim_start_matches("0x"), 16)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_waits_out_an_rpc_outage_and_is_never_sent_twice() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let opts = ChainOpts {
        rpc_proxy: true,
        ..ChainOpts::default()
    };
    let chain = Chain::start(dir.path(), opts).await?;
    let signer = chain.dev_keys()[1].clone();
    let me = signer.address();
    let mut config = ChainConfig::new(chain.node_rpc_url(), chain.escrow(), chain.usdc());
    config.retry = RetryPolicy::new(2, Duration::from_millis(50), Duration::from_millis(50));
    let client = ChainClient::connect(config, signer).await?;
    // Nothing is owed to this account: the escrow refuses the withdrawal (`NothingToWithdraw`)
    // when its gas is estimated, so the answer shows the chain was reached and sends nothing.
    let withdraw = ChainTx::Withdraw {
        token: chain.usdc(),
    };
    let before = nonce(&chain, me).await?;

    chain.cut_rpc()?;
    let err = client.submit(&withdraw).await.expect_err("the RPC is cut");
    assert!(matches!(err, ChainError::Unreachable { .. }), "{err:?}");

    // The RPC comes back 2.5 s into the outage-riding submit.
    let outage = Duration::from_millis(2_500);
    let started = Instant::now();
    let restore = async {
        tokio::time::sleep(outage).await;
        chain.restore_rpc()
    };
    let (answer, restored) = tokio::join!(
        client.submit_through_outage(&withdraw, &CHAIN_OUTAGE),
        restore
    );
    restored?;
    let err = answer.expect_err("the escrow refuses a withdrawal of nothing");
    match &err {
        ChainError::Reverted { reason, tx, .. } => {
            assert_eq!(reason.name(), Some("NothingToWithdraw"), "{err}");
            assert_eq!(*tx, None, "refused at the estimate: nothing was sent");
        }
        other => panic!("the chain's answer was expected, got {other:?}"),
    }
    ensure!(
        started.elapsed() >= outage,
        "the answer came before the RPC was back"
    );
    assert_eq!(
        nonce(&chain, me).await?,
        before,
        "no transaction was sent while the RPC was away"
    );

    // An outage longer than the patience comes back as the outage.
    chain.cut_rpc()?;
    let short = RetryPolicy::new(2, Duration::from_millis(100), Duration::from_millis(100));
    let err = client
        .submit_through_outage(&withdraw, &short)
        .await
        .expect_err("the RPC stays cut");
    assert!(matches!(err, ChainError::Unreachable { .. }), "{err:?}");
    chain.restore_rpc()?;
    Ok(())
}
