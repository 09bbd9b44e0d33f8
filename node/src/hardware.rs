//! What this node claims in its hello and bids: the memory its operator offers for training
//! (`--memory-mb`), by default the machine's RAM. The trainer plans its micro-batch from the
//! same figure, so what a provider declares is what it trains within.

use crate::wire::{DeviceKind, Hardware};

/// RAM assumed when /proc/meminfo cannot be read (non-Linux, sandboxes).
const FALLBACK_MEMORY: u64 = 4 << 30;

/// This node's hardware: `memory` when the operator declared it, else the detected RAM.
pub fn local(memory: Option<u64>) -> Hardware {
    Hardware {
        device: DeviceKind::Cpu,
        memory_bytes: memory.unwrap_or_else(|| mem_total().unwrap_or(FALLBACK_MEMORY)),
    }
}

fn mem_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&text)
}

fn parse_mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_total_in_kib() {
        let t = "MemFree: 1 kB\nMemTotal:       16384 kB\n";
        assert_eq!(parse_mem_total(t), Some(16384 * 1024));
        assert_eq!(parse_mem_total("nothing"), None);
        assert_eq!(parse_mem_total("MemTotal: x kB"), None);
    }
}
