//! Testnet scenario files (`gpuchain testnet run <scenario.toml>`, the fault matrix): arbitrary
//! text into the parser and its checks. A scenario that is accepted keeps the rules the
//! checks promise: unique node names, a client node, a quorum inside the committee.
#![no_main]

use gpuchain_testnet::scenario::Scenario;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(s) = Scenario::parse(text) {
        let mut names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(
            names.len(),
            before,
            "accepted a scenario naming a node twice"
        );
        assert!(
            s.nodes
                .iter()
                .any(|n| n.name == s.job.client && n.role == "client"),
            "accepted a scenario whose job.client is not a client node"
        );
        assert!(
            s.quorum() <= s.committee(),
            "accepted a quorum larger than its committee"
        );
    }
});
