//! Which of an interval's states a provider keeps for spot checks: the anchors.
//!
//! Keeping every step's state costs `interval × state size` per checkpoint (hundreds of MB a
//! step at transformer size). Instead the interval `parent_step ..= step` is cut into at most
//! [`SEGMENTS`] segments of near-equal length; the state at the start of each segment is an
//! anchor. The first anchor is the parent state (the previous checkpoint's); the interval's
//! last state is the checkpoint itself and is never an anchor. So the provider keeps at most
//! [`SEGMENTS`] states besides the checkpoint, whatever the interval.
//!
//! The guarantee is unchanged: every step's hash is still committed in the announce, and the
//! verifier samples transitions the provider could not predict. To check transition `s - 1 → s`
//! it fetches the nearest anchor at or before `s - 1` and replays forward to `s`, comparing
//! every replayed state with its committed hash, so a cheat in any replayed step is caught and
//! a verifier replays at most `⌈span / SEGMENTS⌉` steps a sample.
//!
//! Provider, verifier and simulator all take the anchors from [`anchor_steps`]; nothing else
//! decides them, and an announce that names others is refused by validation.

use crate::types::Step;

/// Most segments (hence anchors) per interval: storage for spot checks stays within this many
/// states per checkpoint, and a sample replays at most `⌈interval / SEGMENTS⌉` steps.
pub const SEGMENTS: u64 = 3;

/// The anchor steps of the interval `parent_step ..= step`, ascending and distinct: segment
/// `k` starts at `parent_step + ⌊k · span / SEGMENTS⌋`. Empty when `step <= parent_step` (no
/// interval). Never more than [`SEGMENTS`] entries, whatever the (attacker-chosen) steps.
pub fn anchor_steps(parent_step: Step, step: Step) -> Vec<Step> {
    let Some(span) = step.checked_sub(parent_step).filter(|s| *s > 0) else {
        return Vec::new();
    };
    let mut anchors: Vec<Step> = Vec::with_capacity(SEGMENTS as usize);
    for k in 0..SEGMENTS {
        // In u128: k · span overflows u64 for spans near u64::MAX.
        let offset = (u128::from(k) * u128::from(span) / u128::from(SEGMENTS)) as u64;
        let a = parent_step + offset;
        if anchors.last() != Some(&a) {
            anchors.push(a);
        }
    }
    anchors
}

/// The anchor a replay of transition `step - 1 → step` starts from: the last anchor at or
/// before `step - 1`. None when no anchor precedes it (a step outside the interval).
pub fn anchor_before(anchors: &[Step], step: Step) -> Option<Step> {
    let from = step.checked_sub(1)?;
    anchors.iter().rev().find(|a| **a <= from).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_split_the_interval_into_at_most_three_segments() {
        assert_eq!(anchor_steps(0, 50), vec![0, 16, 33]);
        assert_eq!(anchor_steps(100, 110), vec![100, 103, 106]);
        assert_eq!(anchor_steps(7, 8), vec![7]);
        assert_eq!(anchor_steps(7, 9), vec![7, 8]);
        assert_eq!(anchor_steps(7, 10), vec![7, 8, 9]);
        assert!(anchor_steps(5, 5).is_empty());
        assert!(anchor_steps(6, 5).is_empty());
        let huge = anchor_steps(0, u64::MAX);
        assert_eq!(huge.len(), 3);
        assert!(huge.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn every_transition_has_an_anchor_within_a_segment() {
        for (parent, step) in [(0u64, 1u64), (0, 2), (0, 3), (0, 50), (40, 97), (0, 1000)] {
            let anchors = anchor_steps(parent, step);
            assert!(anchors.len() as u64 <= SEGMENTS);
            assert_eq!(anchors[0], parent, "the parent state is the first anchor");
            assert!(
                anchors.iter().all(|a| *a < step),
                "the checkpoint is no anchor"
            );
            let longest = (step - parent).div_ceil(SEGMENTS);
            for s in parent + 1..=step {
                let a = anchor_before(&anchors, s).expect("an anchor");
                assert!(a < s && s - a <= longest, "{parent}..{step}: {s} from {a}");
            }
            assert_eq!(anchor_before(&anchors, parent), None);
        }
    }
}
