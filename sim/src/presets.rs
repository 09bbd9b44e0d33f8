//! Named configurations: the product page's 4 Nov story, its in-browser "break it" game, the
//! randomised fault mix CI runs over hundreds of seeds, and the 10,000-node churn run.

use crate::cheat::CheatKind;
use crate::config::{
    CheatConfig, ChurnConfig, HardwareClass, HostileConfig, JobConfig, NamedProvider,
    NetworkConfig, ProtocolConfig, ScriptAction, ScriptedFault, SimConfig, USDC,
};
use gpuchain_protocol::signing::Scheme;

pub const NAMES: [&str; 6] = [
    "nov4",
    "break-it",
    "faults",
    "faults-protocol",
    "hostile",
    "churn-10k",
];

pub fn by_name(name: &str) -> Option<SimConfig> {
    match name {
        "nov4" => Some(nov4()),
        "break-it" => Some(break_it()),
        "faults" => Some(faults()),
        "faults-protocol" => Some(faults_protocol()),
        "hostile" => Some(hostile()),
        "churn-10k" => Some(churn_10k()),
        _ => None,
    }
}

fn named(name: &str, price: u128, hardware: &str, cheat: Option<CheatKind>) -> NamedProvider {
    NamedProvider {
        name: name.into(),
        price_per_step: price,
        hardware: hardware.into(),
        cheat,
    }
}

fn local_network() -> NetworkConfig {
    NetworkConfig {
        latency_median_ms: 1.0,
        latency_sigma: 0.2,
        bandwidth_median_mbps: 1000.0,
        ..NetworkConfig::default()
    }
}

/// The 4 Nov run: 400 steps, checkpoints every 50, budget 5 USDC; A (0.001/step) is killed
/// mid-interval after its checkpoint at 150, P (0.002) returns junk and is refused, B (0.003)
/// finishes. Expected: A 0.15, B 0.75, 4.10 back to the client.
pub fn nov4() -> SimConfig {
    SimConfig {
        name: "nov4".into(),
        duration_s: 300.0,
        clients: 1,
        providers: 3,
        verifiers: 2,
        job: JobConfig {
            total_steps: 400,
            checkpoint_interval: 50,
            budget: 5 * USDC,
            max_price_per_step: 10_000,
            ..JobConfig::default()
        },
        network: local_network(),
        hardware: vec![HardwareClass {
            name: "rtx3060".into(),
            weight: 1.0,
            steps_per_s: 10.0,
            memory_bytes: 6 << 30,
        }],
        named_providers: vec![
            named("A", 1_000, "rtx3060", None),
            named("P", 2_000, "rtx3060", Some(CheatKind::Junk)),
            named("B", 3_000, "rtx3060", None),
        ],
        script: vec![ScriptedFault {
            at_s: 22.5,
            provider: "A".into(),
            action: ScriptAction::Kill,
        }],
        keep_call_log: true,
        ..SimConfig::default()
    }
}

/// The product page's game: three providers at 0.002, 0.003 and 0.0025 USDC per step, 200
/// steps, a checkpoint every 25, a 1.00 USDC budget. The scripted moves: stop A after its
/// checkpoint at 50, and C (next cheapest) cheats; B finishes.
pub fn break_it() -> SimConfig {
    SimConfig {
        name: "break-it".into(),
        duration_s: 120.0,
        clients: 1,
        providers: 3,
        verifiers: 2,
        job: JobConfig {
            total_steps: 200,
            checkpoint_interval: 25,
            budget: USDC,
            // The budget covers every step at the maximum price and a fee for each of the two
            // seats on each of the 8 checkpoints (0.016 USDC): 200 × 0.0049 + 0.016 ≤ 1.00.
            max_price_per_step: 4_900,
            loss_tau_steps: 40.0,
            ..JobConfig::default()
        },
        network: local_network(),
        hardware: vec![HardwareClass {
            name: "browser".into(),
            weight: 1.0,
            steps_per_s: 10.0,
            memory_bytes: 8 << 30,
        }],
        named_providers: vec![
            named("A", 2_000, "browser", None),
            named("B", 3_000, "browser", None),
            named("C", 2_500, "browser", Some(CheatKind::Junk)),
        ],
        script: vec![ScriptedFault {
            at_s: 9.5,
            provider: "A".into(),
            action: ScriptAction::Kill,
        }],
        keep_call_log: true,
        ..SimConfig::default()
    }
}

/// Everything at once on a small swarm, then quiet: churn with rejoin, every cheat kind, lost
/// messages, partitions. Faults stop at 40 minutes, so the last jobs must complete (liveness).
/// An hour of 22 nodes is tens of thousands of messages a seed, so the machines sign with
/// the simulated scheme (`faults-protocol` is the secp256k1 run); heartbeats at 2 Hz.
pub fn faults() -> SimConfig {
    SimConfig {
        name: "faults".into(),
        duration_s: 3_600.0,
        clients: 3,
        providers: 14,
        verifiers: 5,
        job: JobConfig {
            total_steps: 600,
            checkpoint_interval: 50,
            budget: 10 * USDC,
            max_price_per_step: 10_000,
            deadline_s: 900,
            grace_s: 120,
            committee_size: 3,
            quorum: 2,
            jobs_per_client: 0,
            last_start_s: 3_000.0,
            ..JobConfig::default()
        },
        protocol: ProtocolConfig {
            heartbeat_ms: 500,
            heartbeat_timeout_ms: 1_250,
            signatures: Scheme::Simulated,
            ..ProtocolConfig::default()
        },
        network: NetworkConfig {
            latency_median_ms: 30.0,
            latency_sigma: 0.6,
            loss: 0.02,
            partition_every_s: 400.0,
            partition_duration_s: 20.0,
            partition_fraction: 0.2,
            ..NetworkConfig::default()
        },
        churn: ChurnConfig {
            mttf_s: 900.0,
            rejoin_s: 60.0,
        },
        cheat: CheatConfig {
            fraction: 0.3,
            ..CheatConfig::default()
        },
        faults_stop_s: Some(2_400.0),
        ..SimConfig::default()
    }
}

/// The fault mix sized for the protocol crate's machines, whose every message is signed and
/// recovered for real (about 0.3 ms a message here): two clients, six providers, four
/// verifiers, 7.5 minutes with faults for the first three, heartbeats every 2 s. The
/// many-seeds test runs it over a few hundred seeds.
pub fn faults_protocol() -> SimConfig {
    let f = faults();
    SimConfig {
        name: "faults-protocol".into(),
        duration_s: 450.0,
        clients: 2,
        providers: 6,
        verifiers: 4,
        job: JobConfig {
            total_steps: 300,
            deadline_s: 300,
            grace_s: 60,
            last_start_s: 300.0,
            ..f.job.clone()
        },
        protocol: ProtocolConfig {
            heartbeat_ms: 2_000,
            heartbeat_timeout_ms: 5_000,
            signatures: Scheme::Secp256k1,
            ..f.protocol.clone()
        },
        network: NetworkConfig {
            partition_every_s: 120.0,
            partition_duration_s: 15.0,
            partition_fraction: 0.25,
            ..f.network.clone()
        },
        churn: ChurnConfig {
            mttf_s: 240.0,
            rejoin_s: 30.0,
        },
        faults_stop_s: Some(180.0),
        ..f
    }
}

/// A market with attackers in it: 30 % of the clients withhold pay (they release the provider
/// where they should submit an accept, `ClientFault::WithholdPay`) and 20 % of the pooled
/// verifiers are their sybils, voting reject on every checkpoint (`--fault reject-all`); 20 %
/// of the providers cheat. 10 clients run two jobs each, one after the other, on 12 providers
/// and a pool of 50 verifiers (the last 10 byzantine: registered back to back, so adjacent in
/// the pool); every job's committee is 9 seats with a quorum of 5, drawn by the escrow from
/// the chain's block hash.
///
/// Why 9: a reject slashes only when the whole committee signed it, so an honest provider
/// loses stake only on a job whose every seat is byzantine. The committee is drawn once per
/// job, uniformly without replacement (the contract's shuffle; adjacent sybils are drawn
/// together no more often than any others): C(10,k)/C(50,k) per job (README, "Why
/// `hostile`'s committees have 9 seats"), 4.0 × 10⁻⁹ for 9 seats, 2.4 × 10⁻⁵ expected over
/// the 6,000 jobs of the CI's 300 seeds; 7 seats would be 1.2 × 10⁻⁶ (0.007 expected; none
/// in seeds 1–300, but twice the jobs lost to byzantine quorums), 5 seats 1.2 × 10⁻⁴ (0.71
/// expected: seeds 137 and 156 do lose honest stake). A byzantine quorum (5 or more of the 9,
/// ≈ 1.0 % of jobs) still rejects honest work, unslashed: those jobs stall and expire. Simulated signatures; no churn, loss or
/// partitions, so what goes wrong is the attackers'.
pub fn hostile() -> SimConfig {
    SimConfig {
        name: "hostile".into(),
        duration_s: 1_500.0,
        clients: 10,
        providers: 12,
        verifiers: 50,
        job: JobConfig {
            total_steps: 400,
            checkpoint_interval: 50,
            budget: 5 * USDC,
            max_price_per_step: 10_000,
            deadline_s: 600,
            grace_s: 60,
            committee_size: 9,
            quorum: 5,
            jobs_per_client: 2,
            ..JobConfig::default()
        },
        protocol: ProtocolConfig {
            heartbeat_ms: 500,
            heartbeat_timeout_ms: 1_250,
            signatures: Scheme::Simulated,
            ..ProtocolConfig::default()
        },
        hardware: vec![
            HardwareClass {
                name: "rtx3060".into(),
                weight: 2.0,
                steps_per_s: 10.0,
                memory_bytes: 6 << 30,
            },
            HardwareClass {
                name: "rtx4090".into(),
                weight: 1.0,
                steps_per_s: 30.0,
                memory_bytes: 24 << 30,
            },
        ],
        cheat: CheatConfig {
            fraction: 0.2,
            rate: 0.5,
            ..CheatConfig::default()
        },
        hostile: HostileConfig {
            byzantine_verifiers: 0.2,
            withhold_pay_clients: 0.3,
        },
        ..SimConfig::default()
    }
}

/// 10,000 nodes for 24 hours: 600 clients running job after job, 8,900 providers of four
/// hardware classes with 6 h mean time to failure, 5 % cheaters, 500 verifiers. Heartbeats
/// at 1 Hz (the protocol default of 10 Hz would be 10× the events for the same story). The
/// protocol crate's own machines play the roles, signing with the simulated scheme.
pub fn churn_10k() -> SimConfig {
    SimConfig {
        name: "churn-10k".into(),
        duration_s: 86_400.0,
        clients: 600,
        providers: 8_900,
        verifiers: 500,
        job: JobConfig {
            total_steps: 20_000,
            checkpoint_interval: 500,
            // Every step at the maximum price (200 USDC) and a fee for each seat on each of
            // the 40 checkpoints: the escrow wants both covered.
            budget: 201 * USDC,
            max_price_per_step: 10_000,
            deadline_s: 6 * 3_600,
            grace_s: 3_600,
            committee_size: 3,
            quorum: 2,
            jobs_per_client: 0,
            last_start_s: 80_000.0,
            checkpoint_bytes: 64 << 20,
            min_accuracy_after_step: 5_000,
            loss_tau_steps: 2_000.0,
            ..JobConfig::default()
        },
        protocol: ProtocolConfig {
            heartbeat_ms: 1_000,
            // Tens of millions of heartbeats a simulated day: with secp256k1 they would be
            // nearly all of the work, so this run signs with the simulated scheme.
            signatures: Scheme::Simulated,
            heartbeat_timeout_ms: 2_500,
            ..ProtocolConfig::default()
        },
        network: NetworkConfig {
            latency_median_ms: 40.0,
            loss: 0.005,
            partition_every_s: 3_600.0,
            partition_duration_s: 60.0,
            partition_fraction: 0.02,
            ..NetworkConfig::default()
        },
        chain: crate::config::ChainConfig {
            block_ms: 2_000,
            ..crate::config::ChainConfig::default()
        },
        churn: ChurnConfig {
            mttf_s: 6.0 * 3_600.0,
            rejoin_s: 1_800.0,
        },
        cheat: CheatConfig {
            fraction: 0.05,
            ..CheatConfig::default()
        },
        full_checks: false,
        ..SimConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid() {
        for n in NAMES {
            let cfg = by_name(n).expect("listed preset exists");
            cfg.validate().unwrap_or_else(|e| panic!("{n}: {e}"));
            assert_eq!(cfg.name, n);
        }
        assert!(by_name("nope").is_none());
    }
}
