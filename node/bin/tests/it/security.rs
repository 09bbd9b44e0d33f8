//! The node's doors, tried as an attacker would: another user of the machine who can reach
//! the loopback API, a web page in the operator's browser, a peer of the swarm, a second
//! process on the same port. Every attempt must be refused and leave nothing behind.

use std::time::Duration;

use serde_json::{Value, json};

use crate::bad_input::{assert_fails_with, run};
use crate::common::{Node, block_on, command, wait_until};

/// Every route, with a body each would accept once past the guard.
fn routes(hash: &str) -> Vec<(&'static str, String, Option<Value>)> {
    vec![
        ("GET", "/v1/status".into(), None),
        ("GET", "/v1/peers".into(), None),
        ("GET", "/v1/messages".into(), None),
        ("GET", "/v1/heartbeats".into(), None),
        ("GET", format!("/v1/blobs/{hash}"), None),
        ("GET", "/v1/jobs/1".into(), None),
        (
            "POST",
            "/v1/publish".into(),
            Some(json!({"topic": "gpuchain/1/jobs", "data_hex": "00"})),
        ),
        (
            "POST",
            "/v1/subscribe".into(),
            Some(json!({"topic": "gpuchain/1/job/7"})),
        ),
        (
            "POST",
            "/v1/heartbeat".into(),
            Some(json!({"topic": "gpuchain/1/job/7"})),
        ),
        (
            "POST",
            "/v1/blobs".into(),
            Some(json!({"path": "f.bin", "share": true})),
        ),
        (
            "POST",
            "/v1/blobs/fetch".into(),
            Some(json!({"hash": hash})),
        ),
        (
            "POST",
            format!("/v1/blobs/{hash}/export"),
            Some(json!({"path": "out.bin"})),
        ),
        ("POST", "/v1/jobs".into(), Some(json!({}))),
        ("POST", "/v1/shutdown".into(), None),
        (
            "POST",
            "/v1/test/cheat".into(),
            Some(json!({"fault": "junk"})),
        ),
        (
            "POST",
            "/v1/test/partition".into(),
            Some(json!({"peers": [], "blocked": true})),
        ),
    ]
}

#[test]
fn no_route_answers_without_the_token_or_to_a_foreign_host_or_origin() {
    let root = tempfile::tempdir().expect("tmp");
    let a = Node::start("A", &root.path().join("a"), None, &[]);
    std::fs::write(a.dir.join("import").join("f.bin"), b"content").expect("write");
    let hash = "11".repeat(32);

    // The token file exists, holds 64 hex characters and only the node's user can read it.
    let token_file = a.dir.join("api.token");
    let token = std::fs::read_to_string(&token_file).expect("token file");
    assert_eq!(token.trim().len(), 64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "token file mode {mode:o}");
    }

    let anonymous = gpuchain_api::ApiClient::new(a.api, None);
    let evil_host = "evil.example:80".to_string();
    let port_host = format!("rebind.evil.example:{}", a.api.port());
    let wrong = format!("Bearer {}", "0".repeat(64));
    for (method, path, body) in routes(&hash) {
        let r = block_on(anonymous.send(method, &path, body.as_ref(), &[])).expect("answer");
        assert_eq!(r.status, 401, "{method} {path} without a token: {}", r.body);

        let (code, v) = a.request(method, &path, body.clone(), &[("authorization", &wrong)]);
        assert_eq!(code, 401, "{method} {path} with a wrong token: {v}");

        // DNS rebinding: the page's own name resolving to 127.0.0.1, with the token even.
        for host in [&evil_host, &port_host] {
            let (code, v) = a.request(method, &path, body.clone(), &[("host", host)]);
            assert_eq!(code, 403, "{method} {path} with Host {host}: {v}");
        }
        for origin in ["http://evil.example", "null", "https://127.0.0.1"] {
            let (code, v) = a.request(method, &path, body.clone(), &[("origin", origin)]);
            assert_eq!(code, 403, "{method} {path} from Origin {origin}: {v}");
        }
    }

    // The cross-site "simple request" that stopped a node: text/plain, foreign Origin, no
    // token. Refused, and the node is still there.
    let r = block_on(anonymous.send(
        "POST",
        "/v1/shutdown",
        None::<&()>,
        &[
            ("content-type", "text/plain"),
            ("origin", "http://evil.example"),
        ],
    ))
    .expect("answer");
    assert_eq!(r.status, 403, "{}", r.body);
    // Nothing the refused requests asked for happened: no blob was imported or exported.
    let st = a.get("/v1/status");
    assert!(st["peer_id"].is_string(), "{st}");
    assert!(!a.dir.join("export").join("out.bin").exists());

    // The node's own pages (same origin) and localhost are fine with the token.
    let own = format!("http://127.0.0.1:{}", a.api.port());
    let localhost = format!("localhost:{}", a.api.port());
    let (code, v) = a.request("GET", "/v1/status", None, &[("origin", &own)]);
    assert_eq!(code, 200, "{v}");
    let (code, v) = a.request("GET", "/v1/status", None, &[("host", &localhost)]);
    assert_eq!(code, 200, "{v}");

    // The token survives a restart, so a dashboard or script keeps working.
    let mut a = a;
    a.restart();
    assert_eq!(
        std::fs::read_to_string(&token_file).expect("token file"),
        token
    );
    a.get("/v1/status");
}

/// `/metrics` is for a scraper on this machine: no token on loopback, but the same `Host`
/// and `Origin` checks as every route, so a web page can neither read it cross-site nor
/// through DNS rebinding.
#[test]
fn metrics_need_no_token_on_loopback_but_keep_the_host_and_origin_checks() {
    use std::io::{Read, Write};

    let root = tempfile::tempdir().expect("tmp");
    let a = Node::start("A", &root.path().join("a"), None, &[]);
    let anonymous = gpuchain_api::ApiClient::new(a.api, None);
    let text = block_on(anonymous.metrics()).expect("metrics without a token");
    assert!(text.ends_with("# EOF\n"), "{text}");
    for series in [
        "gpuchain_steps_total 0",
        "gpuchain_peers 0",
        "gpuchain_transactions_total{outcome=\"mined\"} 0",
        "# TYPE gpuchain_detection_latency_seconds histogram",
    ] {
        assert!(text.contains(series), "{series:?} not in\n{text}");
    }

    // Served as OpenMetrics text, which is what Prometheus negotiates for.
    let mut conn = std::net::TcpStream::connect(a.api).expect("connect");
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        a.api
    )
    .expect("request");
    let mut raw = String::new();
    conn.read_to_string(&mut raw).expect("answer");
    let head = raw
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );

    // A foreign page, or a rebound name, is refused even with the token.
    for origin in ["http://evil.example", "null"] {
        let (code, v) = a.request("GET", "/metrics", None, &[("origin", origin)]);
        assert_eq!(code, 403, "from Origin {origin}: {v}");
        let r = block_on(anonymous.send("GET", "/metrics", None::<&()>, &[("origin", origin)]))
            .expect("answer");
        assert_eq!(
            r.status, 403,
            "from Origin {origin} without a token: {}",
            r.body
        );
    }
    let host = format!("rebind.evil.example:{}", a.api.port());
    let (code, v) = a.request("GET", "/metrics", None, &[("host", &host)]);
    assert_eq!(code, 403, "with Host {host}: {v}");
}

#[test]
fn a_node_not_started_for_a_testnet_takes_no_cheat_even_with_the_token() {
    let root = tempfile::tempdir().expect("tmp");
    let a = Node::start("A", &root.path().join("a"), None, &[]);
    let (code, v) = a.request(
        "POST",
        "/v1/test/cheat",
        Some(json!({"fault": "junk"})),
        &[],
    );
    assert_eq!(code, 403, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("--test-cheat-control")),
        "{v}"
    );
    // Nothing but a provider may be started so.
    let out = command()
        .args(["node", "--data-dir"])
        .arg(root.path().join("b"))
        .arg("--test-cheat-control")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--role provider"), "{err}");
}

#[test]
fn a_node_not_started_for_a_testnet_takes_no_partition_even_with_the_token() {
    let root = tempfile::tempdir().expect("tmp");
    let a = Node::start("A", &root.path().join("a"), None, &[]);
    let (code, v) = a.request(
        "POST",
        "/v1/test/partition",
        Some(json!({"peers": [], "blocked": true})),
        &[],
    );
    assert_eq!(code, 403, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("--test-partition-control")),
        "{v}"
    );
    // Started for one, it still refuses what is not a peer id.
    let b = Node::start(
        "B",
        &root.path().join("b"),
        None,
        &["--test-partition-control"],
    );
    let (code, v) = b.request(
        "POST",
        "/v1/test/partition",
        Some(json!({"peers": ["not-a-peer"], "blocked": true})),
        &[],
    );
    assert_eq!(code, 400, "{v}");
}

#[test]
fn the_keystore_cannot_be_imported_exported_over_or_fetched_by_a_peer() {
    let root = tempfile::tempdir().expect("tmp");
    let a = Node::start("A", &root.path().join("a"), None, &[]);
    let b = Node::start("B", &root.path().join("b"), Some(&a.tcp_addr), &[]);
    let keystore = a.dir.join("keystore").join("node.json");
    let key_bytes = std::fs::read(&keystore).expect("keystore exists");

    // The attack of the report: import the keystore, read its hash, fetch it from a peer.
    let outside = root.path().join("elsewhere.bin");
    std::fs::write(&outside, b"not in the import folder").expect("write");
    let mut attempts: Vec<Value> = vec![
        json!({ "path": keystore, "share": true }),
        json!({ "path": "../keystore/node.json", "share": true }),
        json!({ "path": "../identity.key", "share": true }),
        json!({ "path": "../api.token", "share": true }),
        json!({ "path": outside, "share": true }),
    ];
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&keystore, a.dir.join("import").join("innocent.bin"))
            .expect("symlink");
        attempts.push(json!({ "path": "innocent.bin", "share": true }));
    }
    for body in attempts {
        let (code, v) = a.post("/v1/blobs", body.clone());
        assert_eq!(code, 403, "import {body}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }

    // Even knowing the keystore's hash, a peer gets nothing: it is not in the store, and a
    // private blob that is in the store is not served either.
    let key_hash = blake3::hash(&key_bytes).to_hex().to_string();
    std::fs::write(a.dir.join("import").join("private.bin"), b"operator's own").expect("w");
    std::fs::write(a.dir.join("import").join("public.bin"), b"published").expect("w");
    let private = a.post_ok("/v1/blobs", json!({ "path": "private.bin" }));
    assert_eq!(private["shared"], false, "{private}");
    let public = a.post_ok("/v1/blobs", json!({ "path": "public.bin", "share": true }));
    assert_eq!(public["shared"], true, "{public}");
    wait_until("B hears A's hello", Duration::from_secs(30), || {
        b.knows_blobs_of(&a.peer_id)
    });
    for hash in [key_hash.as_str(), private["hash"].as_str().expect("hash")] {
        let (code, v) = b.post(
            "/v1/blobs/fetch",
            json!({ "hash": hash, "from": [a.peer_id] }),
        );
        assert_eq!(code, 502, "B fetched {hash} from A: {v}");
        let st = b.get(&format!("/v1/blobs/{hash}"));
        assert_eq!(st["complete"], false, "{st}");
    }
    // What A shares, B gets: the gate refuses by content, not wholesale.
    let got = b.post_ok(
        "/v1/blobs/fetch",
        json!({ "hash": public["hash"], "from": [a.peer_id], "export": "public.bin" }),
    );
    assert_eq!(got["transferred"], true, "{got}");
    assert_eq!(
        std::fs::read(b.dir.join("export").join("public.bin")).expect("exported"),
        b"published"
    );

    // Exports go only into the export folder: no climbing out, no absolute paths
    // elsewhere, no overwriting the keystore, no following a planted symlink.
    let target = root.path().join("written-by-api");
    let mut exports: Vec<Value> = vec![
        json!({ "path": target }),
        json!({ "path": "../keystore/node.json" }),
        json!({ "path": "a/../../../written-by-api" }),
        json!({ "path": keystore }),
    ];
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(root.path(), a.dir.join("export").join("up")).expect("ln");
        exports.push(json!({ "path": "up/written-by-api" }));
    }
    let path = format!(
        "/v1/blobs/{}/export",
        public["hash"].as_str().expect("hash")
    );
    for body in exports {
        let (code, v) = a.post(&path, body.clone());
        assert_eq!(code, 403, "export {body}: {v}");
    }
    let (code, v) = b.post(
        "/v1/blobs/fetch",
        json!({ "hash": public["hash"], "export": target }),
    );
    assert_eq!(code, 403, "fetch+export outside: {v}");
    assert!(!target.exists(), "the API wrote outside its export folder");
    assert_eq!(std::fs::read(&keystore).expect("keystore"), key_bytes);
    let ok = a.post_ok(&path, json!({ "path": "nested/dir/copy.bin" }));
    assert!(ok["size"].as_u64().is_some(), "{ok}");
    assert!(a.dir.join("export/nested/dir/copy.bin").is_file());
}

#[test]
fn a_second_node_on_a_busy_port_exits_naming_the_port() {
    let root = tempfile::tempdir().expect("tmp");
    let a = Node::start("A", &root.path().join("a"), None, &[]);
    let tcp_port: u16 = a
        .tcp_addr
        .split('/')
        .nth(4)
        .and_then(|p| p.parse().ok())
        .expect("tcp port");
    let mut c = command();
    c.arg("node")
        .arg("--data-dir")
        .arg(root.path().join("b"))
        .args(["--listen", &format!("/ip4/127.0.0.1/tcp/{tcp_port}")])
        .args(["--blob-bind", "127.0.0.1:0", "--api", "127.0.0.1:0"]);
    let out = run(c, Duration::from_secs(30));
    assert_fails_with(&out, &[&format!("port {tcp_port}/tcp"), "already in use"]);

    // The same for the API's port.
    let mut c = command();
    c.arg("node")
        .arg("--data-dir")
        .arg(root.path().join("c"))
        .args([
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--blob-bind",
            "127.0.0.1:0",
        ])
        .args(["--api", &a.api.to_string()]);
    let out = run(c, Duration::from_secs(30));
    assert_fails_with(&out, &[&format!("port {}/tcp", a.api.port()), "--api"]);

    // A is untouched and still the only one answering on its port.
    let st = a.get("/v1/status");
    assert_eq!(st["peer_id"], a.peer_id.as_str());
}

#[test]
fn a_remote_api_needs_an_explicit_flag() {
    let root = tempfile::tempdir().expect("tmp");
    let mut c = command();
    c.arg("node")
        .arg("--data-dir")
        .arg(root.path().join("a"))
        .args([
            "--listen",
            "/ip4/127.0.0.1/tcp/0",
            "--blob-bind",
            "127.0.0.1:0",
        ])
        .args(["--api", "0.0.0.0:0"]);
    let out = run(c, Duration::from_secs(30));
    assert_fails_with(&out, &["--api-allow-remote"]);
}
