//! A raw libp2p peer inside the test process speaks gossipsub to a real node process and
//! sends garbage, a hello that claims someone else's identity, an off-topic heartbeat and
//! unsigned messages. The node rejects them, scores the peer down, and keeps relaying honest
//! traffic.

use std::time::{Duration, Instant};

use crate::common::{Node, wait_until};
use futures::StreamExt;
use gpuchain_node::topics::{HELLO_TOPIC, JOBS_TOPIC, heartbeat_topic, job_topic};
use gpuchain_node::wire::{
    DeviceKind, Hardware, Heartbeat, Message, NodeHello, encode_blob_endpoint,
};
use gpuchain_protocol::signing::{Sig65, SigningKey};
use gpuchain_protocol::types::{Address, U256};
use libp2p::gossipsub::{self, IdentTopic, MessageAuthenticity};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, Swarm, noise, tcp, yamux};
use serde_json::json;

/// A bare libp2p peer over tcp with only the behaviour `make` builds.
fn bare_swarm<B: libp2p::swarm::NetworkBehaviour>(
    make: impl FnOnce(&libp2p::identity::Keypair) -> B,
) -> Swarm<B> {
    libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(
            tcp::Config::default(),
            noise::Config::new,
            yamux::Config::default,
        )
        .expect("tcp")
        .with_behaviour(make)
        .expect("behaviour")
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build()
}

fn raw_swarm(
    auth: impl FnOnce(&libp2p::identity::Keypair) -> MessageAuthenticity,
) -> Swarm<gossipsub::Behaviour> {
    bare_swarm(|key| {
        let config = gossipsub::ConfigBuilder::default()
            .heartbeat_interval(Duration::from_millis(200))
            .validation_mode(gossipsub::ValidationMode::None)
            .build()
            .expect("config");
        gossipsub::Behaviour::new(auth(key), config).expect("gossipsub")
    })
}

/// Drives the swarm until `node` is subscribed to `topic` as seen from the swarm.
async fn wait_subscribed(
    swarm: &mut Swarm<gossipsub::Behaviour>,
    topic: &str,
    node: &libp2p::PeerId,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = swarm
            .behaviour()
            .all_peers()
            .any(|(p, topics)| p == node && topics.iter().any(|t| t.as_str() == topic));
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node never subscribed to {topic}"
        );
        let _ = tokio::time::timeout(Duration::from_millis(100), swarm.select_next_some()).await;
    }
}

/// Keeps the swarm's connections serviced for a while.
async fn pump(swarm: &mut Swarm<gossipsub::Behaviour>, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if let Ok(SwarmEvent::ConnectionClosed { cause, .. }) =
            tokio::time::timeout(Duration::from_millis(50), swarm.select_next_some()).await
        {
            eprintln!("garbage peer connection closed: {cause:?}");
        }
    }
}

fn score_of(node: &Node, peer: &str) -> (f64, u64) {
    let p = node.peer(peer).unwrap_or_default();
    (
        p["score"].as_f64().unwrap_or(0.0),
        p["rejected_messages"].as_u64().unwrap_or(0),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_peer_is_rejected_and_scored_down() {
    let root = tempfile::tempdir().expect("tmp");
    let victim = Node::start("victim", &root.path().join("v"), None, &[]);
    let honest = Node::start(
        "honest",
        &root.path().join("h"),
        Some(&victim.tcp_addr),
        &[],
    );
    let addr: Multiaddr = victim.tcp_addr.parse().expect("multiaddr");
    let victim_id: libp2p::PeerId = victim.peer_id.parse().expect("peer id");
    let job = job_topic(U256::from(8));
    for n in [&victim, &honest] {
        n.post_ok("/v1/subscribe", json!({ "topic": job }));
        n.post_ok(
            "/v1/subscribe",
            json!({ "topic": heartbeat_topic(U256::from(8)) }),
        );
    }

    // --- A signed peer sending invalid content.
    let mut bad = raw_swarm(|k| MessageAuthenticity::Signed(k.clone()));
    let bad_id = bad.local_peer_id().to_string();
    bad.behaviour_mut()
        .subscribe(&IdentTopic::new(JOBS_TOPIC))
        .expect("sub");
    bad.behaviour_mut()
        .subscribe(&IdentTopic::new(HELLO_TOPIC))
        .expect("sub");
    bad.behaviour_mut()
        .subscribe(&IdentTopic::new(&job))
        .expect("sub");
    bad.dial(addr.clone()).expect("dial");
    wait_subscribed(&mut bad, JOBS_TOPIC, &victim_id).await;
    wait_subscribed(&mut bad, HELLO_TOPIC, &victim_id).await;
    wait_subscribed(&mut bad, &job, &victim_id).await;

    // Correctly signed with an Ethereum key, but it claims the honest node's peer id and
    // blob endpoint while the gossip message is signed by the garbage peer.
    let honest_peer: libp2p::PeerId = honest.peer_id.parse().expect("peer id");
    let impostor_hello = hello_for(&honest_peer, &honest_peer);
    // A valid heartbeat for job 99, sent on job 8's topic.
    let off_topic = Message::Heartbeat(
        Heartbeat {
            job_id: U256::from(99),
            epoch: 1,
            provider: Address::ZERO,
            seq: 1,
            step: 1,
            loss: 0.0,
            checkpointing: false,
            starved_ms: 0,
            signature: Sig65::ZERO,
        }
        .sign(&SigningKey::from_seed(4)),
    )
    .encode();
    let payloads: Vec<(&str, Vec<u8>)> = vec![
        (JOBS_TOPIC, b"\xff\xfe garbage that is not CBOR".to_vec()),
        (JOBS_TOPIC, vec![0xa1; 64]),
        (HELLO_TOPIC, impostor_hello),
        (job.as_str(), off_topic),
    ];
    for (topic, data) in payloads {
        // An error only means the node already dropped us from its mesh: the point is made.
        let _ = bad.behaviour_mut().publish(IdentTopic::new(topic), data);
        pump(&mut bad, Duration::from_millis(300)).await;
    }

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        pump(&mut bad, Duration::from_millis(200)).await;
        let (score, rejected) = score_of(&victim, &bad_id);
        if rejected >= 2 && score <= gpuchain_node::scoring::GRAYLIST_THRESHOLD {
            eprintln!("garbage peer: {rejected} rejected, score {score}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "garbage peer not scored down: rejected {rejected}, score {score}\n{}",
            victim.log_tail()
        );
    }
    // The impostor hello did not overwrite what the victim knows about the honest node.
    let h = victim.peer(&honest.peer_id).unwrap_or_default();
    assert!(
        !h["blob_addrs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "127.0.0.1:9")),
        "impostor hello accepted: {h}"
    );

    // --- An unsigned peer: strict validation drops its messages.
    let mut anon = raw_swarm(|_| MessageAuthenticity::Anonymous);
    let anon_id = anon.local_peer_id().to_string();
    anon.behaviour_mut()
        .subscribe(&IdentTopic::new(&job))
        .expect("sub");
    anon.dial(addr).expect("dial");
    wait_subscribed(&mut anon, &job, &victim_id).await;
    for i in 0..3u8 {
        let _ = anon
            .behaviour_mut()
            .publish(IdentTopic::new(&job), vec![i; 32]);
        pump(&mut anon, Duration::from_millis(300)).await;
    }
    let mut anon_score = 0.0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        pump(&mut anon, Duration::from_millis(200)).await;
        anon_score = score_of(&victim, &anon_id).0;
        if anon_score < 0.0 {
            break;
        }
    }
    assert!(
        anon_score < 0.0,
        "unsigned peer not penalised: {anon_score}"
    );

    // Nothing crashed, and honest gossip still flows through the victim.
    let st = victim.status();
    assert!(
        st["counters"]["rejected"].as_u64().unwrap_or(0) >= 2,
        "{st}"
    );
    victim.post_ok("/v1/heartbeat", json!({ "topic": job }));
    wait_until(
        "honest heartbeats after the attack",
        Duration::from_secs(20),
        || {
            honest.get("/v1/heartbeats")["received"]
                .as_u64()
                .unwrap_or(0)
                >= 5
        },
    );
    assert!(honest.status()["peer_id"].is_string());
}

/// A signed hello naming `peer` and the blob endpoint of `endpoint_of`.
fn hello_for(peer: &libp2p::PeerId, endpoint_of: &libp2p::PeerId) -> Vec<u8> {
    Message::NodeHello(
        NodeHello {
            peer_id: peer.to_bytes(),
            address: Address::ZERO,
            roles: vec![],
            hardware: Hardware {
                device: DeviceKind::Cpu,
                memory_bytes: 0,
            },
            blob_endpoint: encode_blob_endpoint(
                &gpuchain_node::identity::endpoint_id_hex(endpoint_of).expect("ed25519"),
                &["127.0.0.1:9".parse().expect("addr")],
            ),
            issued_at: 1,
            signature: Sig65::ZERO,
        }
        .sign(&SigningKey::from_seed(5)),
    )
    .encode()
}

/// Connects (anew) and sends `hellos` one after another on that one connection, returning
/// what came back for each: the node's hello bytes, empty when it did not answer.
async fn exchange(
    swarm: &mut Swarm<gpuchain_node::hello::Behaviour>,
    node: &libp2p::PeerId,
    addr: &Multiaddr,
    hellos: Vec<Vec<u8>>,
) -> Vec<Vec<u8>> {
    use libp2p::request_response::{Event, Message as Rr};
    if swarm.is_connected(node) {
        let _ = swarm.disconnect_peer_id(*node);
        while swarm.is_connected(node) {
            let _ =
                tokio::time::timeout(Duration::from_millis(100), swarm.select_next_some()).await;
        }
    }
    swarm.dial(addr.clone()).expect("dial");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !swarm.is_connected(node) {
        assert!(Instant::now() < deadline, "never connected");
        let _ = tokio::time::timeout(Duration::from_millis(100), swarm.select_next_some()).await;
    }
    let mut answers = Vec::new();
    for hello in hellos {
        swarm.behaviour_mut().send_request(node, hello);
        let answer = loop {
            assert!(Instant::now() < deadline, "no answer nor failure");
            match tokio::time::timeout(Duration::from_millis(100), swarm.select_next_some()).await {
                Ok(SwarmEvent::Behaviour(Event::Message {
                    message: Rr::Response { response, .. },
                    ..
                })) => break response,
                Ok(SwarmEvent::Behaviour(Event::OutboundFailure { error, .. })) => {
                    eprintln!("hello request failed: {error}");
                    break Vec::new();
                }
                _ => {}
            }
        };
        answers.push(answer);
    }
    answers
}

/// The direct hello exchange that opens a connection is judged like a gossip hello: the
/// node learns a peer from its own hello, refuses one that speaks for another peer, and
/// answers one request per connection, so a peer cannot make it verify signatures in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_hello_is_judged_like_gossip_and_answered_once_per_connection() {
    let root = tempfile::tempdir().expect("tmp");
    let victim = Node::start("victim", &root.path().join("v"), None, &[]);
    let addr: Multiaddr = victim.tcp_addr.parse().expect("multiaddr");
    let victim_id: libp2p::PeerId = victim.peer_id.parse().expect("peer id");
    let mut peer = bare_swarm(|_| gpuchain_node::hello::behaviour());
    let me = *peer.local_peer_id();

    // Its own hello, then the same again on the same connection.
    let own = hello_for(&me, &me);
    let answers = exchange(&mut peer, &victim_id, &addr, vec![own.clone(), own]).await;
    match Message::decode(&answers[0]) {
        Ok(Message::NodeHello(h)) => assert_eq!(h.peer_id, victim_id.to_bytes()),
        other => panic!("the node did not answer with its hello: {other:?}"),
    }
    assert!(answers[1].is_empty(), "a second answer on one connection");
    let rec = victim.peer(&me.to_string()).expect("peer known");
    assert_eq!(rec["hellos_direct"], 1, "{rec}");
    assert_eq!(rec["blob_addrs"], json!(["127.0.0.1:9"]), "{rec}");
    assert_eq!(rec["rejected_messages"], 0, "{rec}");

    // On a new connection, a hello that speaks for another peer: answered, but refused.
    let other = libp2p::identity::Keypair::generate_ed25519()
        .public()
        .to_peer_id();
    let answers = exchange(
        &mut peer,
        &victim_id,
        &addr,
        vec![hello_for(&other, &other)],
    )
    .await;
    assert!(!answers[0].is_empty(), "no answer on a new connection");
    let rec = victim.peer(&me.to_string()).expect("peer known");
    assert_eq!(rec["hellos_direct"], 1, "{rec}");
    assert_eq!(rec["rejected_messages"], 1, "{rec}");
    assert!(
        victim
            .peer(&other.to_string())
            .is_none_or(|p| p["blob_addrs"] == json!([]))
    );
}
