//! Node config files (`gpuchain node --config node.toml`): arbitrary text into the parser and
//! every check the node applies before it starts. What is accepted keeps the config's rules:
//! a nonzero heartbeat period, detector timeouts of at least 50 ms with the floor under the
//! timeout, the control API on loopback unless remote access was asked for.
#![no_main]

use std::path::PathBuf;
use std::time::Duration;

use gpuchain_node::cli::NodeArgs;
use gpuchain_node::config::NodeConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args = NodeArgs {
        data_dir: Some(PathBuf::from("d")),
        ..Default::default()
    };
    if let Ok(c) = NodeConfig::from_file_text(&args, text) {
        assert!(c.heartbeat_period >= Duration::from_millis(1));
        assert!(c.detector_timeout >= Duration::from_millis(50));
        assert!(c.detector_floor <= c.detector_timeout);
        assert!(c.detector_floor >= Duration::from_millis(50));
        assert!(!c.listen.is_empty());
        if let Some(api) = c.api
            && !api.ip().is_loopback()
        {
            assert!(
                text.contains("api_allow_remote"),
                "a remote API address was accepted without api_allow_remote"
            );
        }
        if !c.roles.is_empty() {
            assert!(c.rpc_url.is_some() && !c.escrow_domain.escrow.is_zero());
        }
    }
});
