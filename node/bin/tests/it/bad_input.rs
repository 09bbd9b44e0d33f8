//! Bad configuration and bad environment: each is a clear error naming the problem, a
//! non-zero exit, and never a panic.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpuchain_api::NodeEvent;

use crate::common::command;

/// Runs the binary to completion (killing it after `timeout`) and returns its output.
pub(crate) fn run(mut cmd: Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "did not exit within {timeout:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn node_cmd(dir: &std::path::Path) -> Command {
    let mut c = command();
    c.arg("node").arg("--data-dir").arg(dir).args([
        "--listen",
        "/ip4/127.0.0.1/tcp/0",
        "--blob-bind",
        "127.0.0.1:0",
    ]);
    c
}

pub(crate) fn assert_fails_with(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success:\n{err}"
    );
    assert_eq!(out.status.code(), Some(1), "exit code:\n{err}");
    assert!(!err.contains("panicked"), "panic:\n{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}

#[test]
fn malformed_config_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cfg = tmp.path().join("node.toml");
    std::fs::write(&cfg, "listen = [\"/ip4/127.0.0.1/tcp/0\"\n").expect("write");
    let mut c = node_cmd(&tmp.path().join("d"));
    c.arg("--config").arg(&cfg);
    assert_fails_with(
        &run(c, Duration::from_secs(20)),
        &["node.toml", "not valid"],
    );

    std::fs::write(&cfg, "hearbeat_period_ms = 5\n").expect("write");
    let mut c = node_cmd(&tmp.path().join("d"));
    c.arg("--config").arg(&cfg);
    assert_fails_with(&run(c, Duration::from_secs(20)), &["hearbeat_period_ms"]);

    let mut c = node_cmd(&tmp.path().join("d"));
    c.arg("--config").arg(tmp.path().join("absent.toml"));
    assert_fails_with(&run(c, Duration::from_secs(20)), &["absent.toml"]);

    let mut c = node_cmd(&tmp.path().join("d"));
    c.args(["--bootstrap", "not/a/multiaddr"]);
    assert_fails_with(
        &run(c, Duration::from_secs(20)),
        &["--bootstrap", "multiaddr"],
    );
}

#[test]
fn unusable_data_dir_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("plain-file");
    std::fs::write(&file, b"x").expect("write");
    assert_fails_with(
        &run(node_cmd(&file), Duration::from_secs(20)),
        &["data dir", "not a directory"],
    );
    assert_fails_with(
        &run(node_cmd(&file.join("sub")), Duration::from_secs(20)),
        &["cannot create data dir"],
    );

    // A directory without write permission. Root ignores permission bits, so the check only
    // means something for other users; the two cases above cover root.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = tmp.path().join("read-only");
        std::fs::create_dir(&ro).expect("mkdir");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).expect("chmod");
        let writable = std::fs::write(ro.join("probe"), b"x").is_ok();
        if !writable {
            assert_fails_with(
                &run(node_cmd(&ro), Duration::from_secs(20)),
                &["permission"],
            );
        } else {
            eprintln!("running as root: permission bits do not apply, read-only case skipped");
        }
        let _ = std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700));
    }
}

#[test]
fn unreachable_bootstrap_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    // A port that was free a moment ago: nobody listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let mut c = node_cmd(&tmp.path().join("d"));
    c.args(["--bootstrap", &format!("/ip4/127.0.0.1/tcp/{port}")])
        .args(["--log-format", "json"]);
    let started = Instant::now();
    let out = run(c, Duration::from_secs(40));
    assert_fails_with(&out, &["bootstrap", &port.to_string()]);
    assert!(started.elapsed() < Duration::from_secs(30));
    // With --log-format json the failure is also a machine-readable event line.
    let err = String::from_utf8_lossy(&out.stderr);
    let fatal = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| match NodeEvent::from_line(&v) {
            Some(NodeEvent::Fatal { error }) => Some(error),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no JSON fatal event:\n{err}"));
    assert!(
        fatal.contains("bootstrap"),
        "the fatal event does not name the bootstrap: {fatal}"
    );
}

#[test]
fn data_dir_in_use_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("d");
    let _running = crate::common::Node::start("first", &dir, None, &[]);
    assert_fails_with(
        &run(node_cmd(&dir), Duration::from_secs(20)),
        &["in use by another gpuchain node"],
    );
}

#[test]
fn missing_password_and_wrong_password() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("d");
    let mut c = node_cmd(&dir);
    c.env_remove("GPUCHAIN_KEYSTORE_PASSWORD");
    assert_fails_with(
        &run(c, Duration::from_secs(20)),
        &["GPUCHAIN_KEYSTORE_PASSWORD"],
    );

    // Create the keystore by running once with a password file, then reopen with another.
    let pw = tmp.path().join("pw");
    std::fs::write(&pw, "right\n").expect("write");
    let mut c = node_cmd(&dir);
    c.env_remove("GPUCHAIN_KEYSTORE_PASSWORD")
        .arg("--keystore-password-file")
        .arg(&pw)
        .args(["--bootstrap", "/ip4/127.0.0.1/tcp/1"]);
    let _ = run(c, Duration::from_secs(40));
    assert!(dir.join("keystore").join("node.json").exists());
    let mut c = node_cmd(&dir);
    c.env("GPUCHAIN_KEYSTORE_PASSWORD", "wrong");
    assert_fails_with(&run(c, Duration::from_secs(20)), &["keystore", "password"]);
}

#[test]
fn help_lists_flags_and_subcommand_groups_fail_without_one() {
    let mut c = command();
    c.args(["node", "--help"]);
    let out = run(c, Duration::from_secs(20));
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--role",
        "--bootstrap",
        "--data-dir",
        "--listen",
        "--api",
        "--config",
        "--blob-bind",
        "--relay",
        "--heartbeat-period-ms",
        "--keystore-password-file",
        "--log-format",
    ] {
        assert!(help.contains(flag), "help lacks {flag}:\n{help}");
    }
    // A subcommand group without its subcommand lists them and fails; it starts nothing.
    let mut c = command();
    c.arg("testnet");
    let out = run(c, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "testnet");
    let err = String::from_utf8_lossy(&out.stderr);
    for sub in ["demo", "up", "run"] {
        assert!(err.contains(sub), "testnet usage lacks {sub}: {err}");
    }
    assert!(out.stdout.is_empty(), "testnet must not print fake output");
}

/// The chain-facing commands name what is wrong (no key, no node, no chain) and exit
/// non-zero without printing results.
#[test]
fn job_provider_and_withdraw_commands_explain_bad_input() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_str().expect("utf-8 path");
    let escrow = "0x00000000000000000000000000000000000000e5";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "withdraw",
                "--data-dir",
                d,
                "--rpc-url",
                "http://127.0.0.1:1",
                "--escrow",
                escrow,
            ],
            "no node key",
        ),
        (
            vec![
                "provider",
                "register",
                "--stake",
                "abc",
                "--data-dir",
                d,
                "--rpc-url",
                "http://127.0.0.1:1",
                "--escrow",
                escrow,
            ],
            "--stake \"abc\" is not an amount",
        ),
        (
            vec![
                "job",
                "submit",
                "--data-dir",
                d,
                "--spec",
                "job.toml",
                "--budget",
                "5",
                "--max-price",
                "0.01",
                "--committee",
                "3",
            ],
            "no running node",
        ),
        (
            vec![
                "job",
                "status",
                "7",
                "--rpc-url",
                "http://127.0.0.1:1",
                "--escrow",
                escrow,
            ],
            "127.0.0.1:1",
        ),
        (
            vec![
                "job",
                "status",
                "seven",
                "--rpc-url",
                "http://127.0.0.1:1",
                "--escrow",
                escrow,
            ],
            "not a job id",
        ),
    ];
    for (args, want) in cases {
        let mut c = command();
        c.args(&args);
        let out = run(c, Duration::from_secs(60));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    }
}

/// The simulator is mounted in the one binary: a preset runs to a checked report, and an
/// unknown preset is a clear error rather than a panic or an empty report.
#[test]
fn sim_subcommand_runs_a_preset_and_refuses_unknown_ones() {
    let mut c = command();
    c.args(["sim", "run", "break-it", "--seed", "1"]);
    let out = run(c, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "sim run failed: {out:?}");
    assert!(stdout.contains("1 completed"), "{stdout}");
    assert!(stdout.contains("junk"), "{stdout}");

    let mut c = command();
    c.args(["sim", "run", "no-such-preset"]);
    let out = run(c, Duration::from_secs(20));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset"));
}
