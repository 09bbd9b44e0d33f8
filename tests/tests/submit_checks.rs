//! `gpuchain job submit` refuses, before sending anything, every job the escrow would refuse,
//! and `gpuchain job status` reports the chain's own figures. Real processes: anvil with the
//! real contracts, a client node and two verifier nodes, and the real `gpuchain` binary for
//! each command. "Nothing sent" is read from anvil: the client node's transaction count
//! (pending included) and its allowance to the escrow do not move.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use gpuchain_protocol::chain::ChainTx;
use gpuchain_testnet::{Address, ChainOpts, Testnet, U256, USDC, binary, poll_until};
use serde_json::{Value, json};

const JOB_FILE: &str = r#"
model = "fashion-cnn"
total_steps = 40
checkpoint_interval = 10
eval_examples = 200
"#;

fn run_dir(tag: &str) -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{tag}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// anvil, a client and two verifiers, with the verifiers' hellos seen by the client.
async fn setup(tag: &str) -> Result<(Testnet, PathBuf)> {
    let dir = run_dir(tag)?;
    let mut net = Testnet::with_new_chain(&dir, binary()?, ChainOpts::default()).await?;
    for (name, role) in [("client", "client"), ("v1", "verifier"), ("v2", "verifier")] {
        let spec = net.role_spec(name, role)?;
        net.spawn(spec).await?;
    }
    let want: Vec<String> = ["v1", "v2"]
        .iter()
        .map(|n| net.node(n).map(|n| n.eth_address().to_string()))
        .collect::<Result<_>>()?;
    let client = net.node("client")?;
    poll_until(
        "the verifiers' hellos at the client",
        Duration::from_secs(30),
        async || {
            let peers = client.peers().await?;
            Ok(want.iter().all(|a| {
                peers.iter().any(|p| {
                    p["eth_address"].as_str() == Some(a.as_str())
                        && p["roles"]
                            .as_array()
                            .is_some_and(|r| r.iter().any(|r| r == "verifier"))
                })
            }))
        },
    )
    .await?;
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
    verifiers: Vec<String>,
    quorum: String,
    deadline: String,
    extra: Vec<String>,
}

impl Submit {
    fn good(net: &Testnet) -> Result<Self> {
        Ok(Self {
            budget: "1".into(),
            max_price: "0.005".into(),
            verifiers: vec![
                net.node("v1")?.eth_address().to_string(),
                net.node("v2")?.eth_address().to_string(),
            ],
            quorum: "2".into(),
            deadline: "3600".into(),
            extra: Vec::new(),
        })
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
        .args(["--verifiers", &s.verifiers.join(",")])
        .args(["--quorum", &s.quorum, "--deadline", &s.deadline])
        .args(["--grace", "1"])
        .args(&s.extra)
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
    let v1 = net.node("v1")?.eth_address().to_string();
    let unknown = Address::repeat_byte(0x42).to_string();

    type Edit = Box<dyn Fn(&mut Submit)>;
    let cases: Vec<(&str, Edit, Vec<String>)> = vec![
        (
            "budget below max price × steps",
            Box::new(|s| s.budget = "0.1".into()),
            vec!["budget 0.1 ".into(), "0.005 × 40 steps = 0.2".into()],
        ),
        (
            "deadline 0",
            Box::new(|s| s.deadline = "0".into()),
            vec!["--deadline".into()],
        ),
        (
            "budget above uint128",
            Box::new(|s| s.budget = "340282366920938463463374607431768.211456".into()),
            vec![
                "budget 340282366920938463463374607431768.211456".into(),
                "above the escrow's limit".into(),
            ],
        ),
        (
            "duplicate verifier",
            Box::new({
                let v1 = v1.clone();
                move |s| s.verifiers = vec![v1.clone(), v1.clone()]
            }),
            vec![v1.clone(), "listed twice (#1 and #2)".into()],
        ),
        (
            "zero verifier",
            Box::new(|s| s.verifiers[1] = Address::ZERO.to_string()),
            vec!["verifier #2 is the zero address".into()],
        ),
        (
            "one verifier",
            Box::new(|s| {
                s.verifiers.truncate(1);
                s.quorum = "1".into();
            }),
            vec!["at least two verifiers, 1 given".into()],
        ),
        (
            "quorum 0",
            Box::new(|s| s.quorum = "0".into()),
            vec!["quorum 0 must be a strict majority of the 2 verifiers".into()],
        ),
        (
            "quorum above the verifiers",
            Box::new(|s| s.quorum = "3".into()),
            vec!["quorum 3 must be a strict majority of the 2 verifiers".into()],
        ),
        (
            "unknown verifier",
            Box::new({
                let unknown = unknown.clone();
                move |s| s.verifiers[1] = unknown.clone()
            }),
            vec![unknown.clone(), "--allow-unknown-verifiers".into()],
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
        let mut s = Submit::good(&net)?;
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
                "verifiers": [net.node("v1")?.eth_address(), net.node("v2")?.eth_address()],
                "quorum": 2,
                "deadline_secs": 3600,
                "grace_secs": 1,
            })),
        )
        .await?;
    ensure!(code != 200, "the node took a too small budget: {body}");
    ensure!(
        body.to_string().contains("0.005 × 40 steps = 0.2"),
        "{body}"
    );
    ensure!(nonce(&net).await? == before, "the node sent a transaction");

    // A good job: exactly approve + createJob, and the approval is spent to the unit.
    let mut s = Submit::good(&net)?;
    s.deadline = "30".into();
    let (ok, out, err) = submit(&net, &job_file, &s).await?;
    ensure!(ok, "good submit failed: {err}");
    let id: U256 = out.parse().with_context(|| format!("job id {out:?}"))?;
    ensure!(nonce(&net).await? == before + 2, "not approve + createJob");
    ensure!(allowance(&net).await?.is_zero(), "allowance left over");

    // No provider: past deadline + grace anyone may expire it, and it refunds everything.
    let chain = net.chain()?;
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
