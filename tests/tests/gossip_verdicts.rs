//! The role machines' verdicts reach gossipsub: a peer that forwards a verifier's
//! equivocating votes (accept and reject of the same checkpoint) is scored down by the
//! client node and graylisted after a couple, while a replayed vote costs nothing and is
//! simply not forwarded. Real processes: anvil, a client node, two verifier nodes, and a
//! plain node in the attacker's hands.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use gpuchain_protocol::messages::Vote;
use gpuchain_protocol::topics::job_topic;
use gpuchain_protocol::{Hash, JobId, Message, Sig65, SigningKey};
use gpuchain_testnet::{
    ChainOpts, JobSubmission, NodeEvent, NodeSpec, Testnet, binary, poll_until,
};
use serde_json::{Value, json};

const JOB_FILE: &str = r#"
model = "fashion-cnn"
total_steps = 40
checkpoint_interval = 10
eval_examples = 100

[quality]
min_accuracy = 0.1
"#;

/// gossipsub's graylist threshold in the node's scoring (`scoring::GRAYLIST_THRESHOLD`).
const GRAYLIST: f64 = -80.0;

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test]
async fn equivocating_votes_cost_their_forwarder_its_score() -> Result<()> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-gossip-verdicts");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let mut net = Testnet::with_new_chain(&dir, binary()?, ChainOpts::default()).await?;
    let spec = net.role_spec("client", "client")?;
    net.spawn(spec).await?;
    for name in ["v1", "v2"] {
        let spec = net.role_spec(name, "verifier")?;
        net.spawn_verifier(spec).await?;
    }
    net.spawn(NodeSpec::new("mallory")).await?;
    net.wait_mesh("client").await?;
    let client = net.node("client")?;
    let mallory = net.node("mallory")?;

    let job_file = dir.join("job.toml");
    std::fs::write(&job_file, JOB_FILE)?;
    let job_id: JobId = net
        .submit_job(
            "client",
            &JobSubmission {
                file: job_file,
                budget: "1".into(),
                max_price: "0.001".into(),
                committee: 2,
                quorum: 2,
                verifier_fee: "0.001".into(),
                deadline_secs: 3600,
                grace_secs: 600,
            },
        )
        .await?;
    // v1's votes count once the escrow has seated it (a pool of two: both are drawn).
    net.wait_event(
        "client",
        gpuchain_testnet::event_is!(ChainCommitteeDrawn),
        Duration::from_secs(30),
    )
    .await?;
    let topic = job_topic(job_id);
    mallory
        .post("/v1/subscribe", &json!({ "topic": topic }))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Mallory holds v1's signed votes (a verifier is an address; its votes travel by anyone).
    let v1 = SigningKey::from_bytes(&net.node("v1")?.signer().to_bytes().0)?;
    let domain = net.chain()?.deployer().domain();
    let checkpoint_hash = Hash::from(*blake3::hash(b"some checkpoint").as_bytes());
    let vote = |step: u64, accept: bool| {
        Vote {
            job_id,
            epoch: 1,
            step,
            checkpoint_hash,
            accept,
            verifier: v1.address(),
            signature: Sig65::ZERO,
        }
        .sign(&domain, &v1)
    };
    let publish = async |v: Vote| -> Result<()> {
        mallory
            .post(
                "/v1/publish",
                &json!({ "topic": topic, "data_hex": hex_encode(&Message::Vote(v).encode()) }),
            )
            .await
            .map(drop)
    };
    let mallory_id = mallory.peer_id().to_string();
    let view = async || -> Result<Value> {
        client
            .peers()
            .await?
            .into_iter()
            .find(|p| p["peer_id"] == mallory_id.as_str())
            .context("the client does not know mallory")
    };

    // An honest vote, then the same vote again: the replay is ignored, not punished.
    publish(vote(10, true)).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    publish(vote(10, true)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = view().await?;
    ensure!(
        before["rejected_messages"] == 0,
        "a replayed vote was punished: {before}"
    );

    // Equivocation: v1 also "rejects" the checkpoint it accepted, then does the same twice
    // more on the next checkpoints.
    publish(vote(10, false)).await?;
    for step in [20, 30] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        publish(vote(step, true)).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        publish(vote(step, false)).await?;
    }
    poll_until(
        "the client to graylist mallory",
        Duration::from_secs(20),
        async || {
            let p = view().await?;
            Ok(p["score"].as_f64().is_some_and(|s| s < GRAYLIST))
        },
    )
    .await?;
    let after = view().await?;
    ensure!(
        after["rejected_messages"].as_u64() >= Some(2),
        "the client counted fewer than two rejected votes: {after}"
    );
    let reasons: Vec<String> = client
        .events()?
        .into_iter()
        .filter_map(|e| match e.event {
            NodeEvent::GossipRejected { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    ensure!(
        reasons.iter().any(|r| r.contains("Equivocation")),
        "no rejection named the equivocation: {reasons:?}"
    );

    // Graylisted: what mallory sends now does not even reach the client's machines.
    let seen = client.get("/v1/messages").await?;
    let before_count = seen.as_array().map_or(0, Vec::len);
    publish(vote(40, true)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = client.get("/v1/messages").await?;
    ensure!(
        seen.as_array().map_or(0, Vec::len) == before_count,
        "a graylisted peer's message was still taken: {seen}"
    );
    Ok(())
}
