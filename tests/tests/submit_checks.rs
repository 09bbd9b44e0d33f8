//! `gpuchain job submit` refuses, before sending anything, every job the escrow would refuse,
//! and `gpuchain job status` reports the chain's own figures. Real processes: anvil with the
//! real contracts, a client node and two verifier nodes, and the real `gpuchain` binary for
//! each command. "Nothing sent" is read from anvil: the client node's transaction count
//! (pending included) and its allowance to the escrow do not move.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gpuchain_protocol::chain::ChainTx;
use gpuchain_testnet::{ChainOpts, Testnet, U256, USDC, binary, poll_until};
use serde_json::{Value, json};

const JOB_FILE: &str = r#"
model = "fashion-cnn"
total_steps = 40
checkpoint_interval = 10
eval_examples = 200
"#;

fn run_dir(tag: &str) -> Result<PathBuf> {
    gpuchain_e2e::run_dir(env!("CARGO_TARGET_TMPDIR"), tag)
}

/// anvil, a client and two verifiers staked in the escrow's pool.
async fn setup(tag: &str) -> Result<(Testnet, PathBuf)> {
    let dir = run_dir(tag)?;
    let mut net = Testnet::with_new_chain(&dir, binary()?, ChainOpts::default()).await?;
    let spec = net.role_spec("client", "client")?;
    net.spawn(spec).await?;
    for name in ["v1", "v2"] {
        let spec = net.role_spec(name, "verifier")?;
        net.spawn_verifier(spec).await?;
    }
    let job_file = dir.join("job.toml");
    std::fs::write(&job_file, JOB_FILE)?;
    Ok((net, job_file))
}

/// The client node's transaction count, pending ones included.
async fn nonce(net: &Testnet) -> Result<u64> {
    let address = net.node("client")?.eth_address();
    let v = net
        .chain()?
        .rpc("eth_getTransactionCount", json!([address, "pending"]))
        .await?;
    let hex = v.as_str().context("a quantity")?;
    Ok(u64::from_str_radix(hex.trim_start_matches("0x"), 16)?)
}

async fn allowance(net: &Testnet) -> Result<U256> {
    let owner = net.node("client")?.eth_address();
    Ok(net.chain()?.deployer().allowance(owner).await?)
}

/// What `gpuchain job submit` is given, as strings (so that bad values can be given).
struct Submit {
    budget: String,
    max_price: String,
    committee: String,
    quorum: String,
    verifier_fee: String,
    deadline: String,
}

impl Submit {
    fn good() -> Self {
        Self {
            budget: "1".into(),
            max_price: "0.005".into(),
            committee: "2".into(),
            quorum: "2".into(),
            verifier_fee: "0.001".into(),
            deadline: "3600".into(),
        }
    }
}

/// Runs `gpuchain job submit`; returns (success, stdout, stderr).
async fn submit(net: &Testnet, job_file: &Path, s: &Submit) -> Result<(bool, String, String)> {
    let out = tokio::process::Command::new(net.binary())
        .args(["job", "submit", "--data-dir"])
        .arg(net.node("client")?.data_dir())
        .arg("--spec")
        .arg(job_file)
        .args(["--budget", &s.budget, "--max-price", &s.max_price])
        .args(["--committee", &s.committee, "--quorum", &s.quorum])
        .args(["--verifier-fee", &s.verifier_fee, "--deadline", &s.deadline])
        .args(["--grace", "1"])
        .env_remove("GPUCHAIN_DATA_DIR")
        .output()
        .await?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    ))
}

async fn job_status(net: &Testnet, id: U256, json: bool) -> Result<String> {
    let chain = net.chain()?;
    let mut cmd = tokio::process::Command::new(net.binary());
    cmd.args([
        "job",
        "status",
        &id.to_string(),
        "--rpc-url",
        chain.rpc_url(),
    ])
    .args(["--escrow", &chain.escrow().to_string()])
    .env_remove("GPUCHAIN_DATA_DIR");
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().await?;
    ensure!(
        out.status.success(),
        "job status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_submits_send_nothing_and_status_reads_the_chain() -> Result<()> {
    let (net, job_file) = setup("submit-checks").await?;
    let before = nonce(&net).await?;
    ensure!(
        allowance(&net).await?.is_zero(),
        "an allowance before any job"
    );
    type Edit = Box<dyn Fn(&mut Submit)>;
    let cases: Vec<(&str, Edit, Vec<String>)> = vec![
        (
            "budget below what the job can cost",
            Box::new(|s| s.budget = "0.1".into()),
            // 0.005 × 40 steps + 0.001 × 2 members × 4 checkpoints
            vec![
                "budget 0.1 is less than the 0.208 the job can cost".into(),
                "0.001 × 2 members × 4 checkpoints".into(),
            ],
        ),
        (
            "deadline 0",
            Box::new(|s| s.deadline = "0".into()),
            vec!["--deadline".into()],
        ),
        (
            "budget above 96 bits",
            Box::new(|s| s.budget = "79228162514264337593543.950336".into()),
            vec![
                "budget 79228162514264337593543.950336".into(),
                "above the escrow's limit".into(),
            ],
        ),
        (
            "committee of one",
            Box::new(|s| {
                s.committee = "1".into();
                s.quorum = "1".into();
            }),
            vec!["a committee of 1 verifiers is outside the escrow's 2..=32".into()],
        ),
        (
            "committee larger than the pool",
            Box::new(|s| {
                s.committee = "3".into();
                s.quorum = "2".into();
            }),
            vec![
                "pool has 2 verifiers".into(),
                "fewer than the committee of 3".into(),
            ],
        ),
        (
            "quorum 0",
            Box::new(|s| s.quorum = "0".into()),
            vec!["quorum 0 must be a strict majority of the committee of 2".into()],
        ),
        (
            "quorum above the committee",
            Box::new(|s| s.quorum = "3".into()),
            vec!["quorum 3 must be a strict majority of the committee of 2".into()],
        ),
        (
            "negative budget",
            Box::new(|s| s.budget = "-1".into()),
            vec!["--budget must be positive, got -1".into()],
        ),
        (
            "negative max price",
            Box::new(|s| s.max_price = "-0.5".into()),
            vec!["--max-price must be positive, got -0.5".into()],
        ),
        (
            "verifier fee above 96 bits",
            Box::new(|s| s.verifier_fee = "79228162514264337593543.950336".into()),
            vec!["verifier fee".into(), "above the escrow's limit".into()],
        ),
        (
            // passes every rule, but the client node holds 1000 USDC: the simulation of
            // approve + createJob says so, in tokens
            "budget above the client's balance",
            Box::new(|s| s.budget = "2000".into()),
            vec![
                "ERC20InsufficientBalance".into(),
                "holds 1000 of the token, 2000 needed".into(),
            ],
        ),
    ];
    for (what, edit, says) in &cases {
        let mut s = Submit::good();
        edit(&mut s);
        let (ok, out, err) = submit(&net, &job_file, &s).await?;
        ensure!(!ok, "{what}: submitted ({out})");
        for needle in says {
            ensure!(
                err.contains(needle.as_str()),
                "{what}: {err:?} lacks {needle:?}"
            );
        }
        ensure!(
            nonce(&net).await? == before,
            "{what}: the client sent a transaction"
        );
        ensure!(
            allowance(&net).await?.is_zero(),
            "{what}: an approve was sent"
        );
        println!("{what}: {err}");
    }

    // Past the command line: the node refuses the same terms from its API.
    let client = net.node("client")?;
    let (code, body) = client
        .request(
            "POST",
            "/v1/jobs",
            Some(&json!({
                "spec_path": job_file,
                "budget": U256::from(100_000u64),
                "max_price_per_step": U256::from(5_000u64),
                "committee_size": 2,
                "quorum": 2,
                "verifier_fee": U256::from(1_000u64),
                "deadline_secs": 3600,
                "grace_secs": 1,
            })),
        )
        .await?;
    ensure!(code != 200, "the node took a too small budget: {body}");
    ensure!(
        body.to_string()
            .contains("less than the 0.208 the job can cost"),
        "{body}"
    );
    ensure!(nonce(&net).await? == before, "the node sent a transaction");

    // A good job: exactly approve + createJob, then the client node draws the committee in a
    // later block; the approval is spent to the unit.
    let mut s = Submit::good();
    s.deadline = "30".into();
    let (ok, out, err) = submit(&net, &job_file, &s).await?;
    ensure!(ok, "good submit failed: {err}");
    let id: U256 = out.parse().with_context(|| format!("job id {out:?}"))?;
    let chain = net.chain()?;
    poll_until("the committee draw", Duration::from_secs(30), async || {
        Ok(chain.deployer().job(id).await?.status != 5)
    })
    .await?;
    ensure!(
        nonce(&net).await? == before + 3,
        "not approve + createJob + drawCommittee"
    );
    ensure!(allowance(&net).await?.is_zero(), "allowance left over");

    // No provider: past deadline + grace anyone may expire it, and it refunds everything.
    chain.rpc("evm_increaseTime", json!([120])).await?;
    chain.rpc("evm_mine", json!([])).await?;
    poll_until("the job to expire", Duration::from_secs(30), async || {
        let v = chain.deployer().job(id).await?;
        if v.status == 4 {
            return Ok(true);
        }
        // the client node may get there first; then this one reverts, harmlessly
        let _ = chain
            .deployer()
            .submit(&ChainTx::Expire { job_id: id })
            .await;
        Ok(false)
    })
    .await?;
    let text = job_status(&net, id, false).await?;
    println!("{text}");
    let v: Value = serde_json::from_str(&job_status(&net, id, true).await?)?;
    ensure!(v["status"] == "Expired", "{v}");
    ensure!(v["budget"] == "1" && v["refunded"] == "1", "{v}");
    ensure!(v["paid_total"] == "0" && v["remaining"] == "0", "{v}");
    ensure!(v["paid"] == json!({}), "{v}");
    let client_credit = chain.withdrawable(client.eth_address()).await?;
    ensure!(
        client_credit == U256::from(USDC),
        "client credited {client_credit}"
    );
    for line in ["status  Expired", "refunded  1", "paid  none"] {
        ensure!(text.contains(line), "{line:?} not in\n{text}");
    }
    if text.contains("deposit") {
        bail!("old figures in {text}");
    }
    Ok(())
}
