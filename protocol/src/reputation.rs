//! Provider reputation as named score changes (reth's style): the client's local view, used to
//! rank bids. Scores are per client and never gossiped, so they cannot be gamed by others.

use std::collections::BTreeMap;

use alloy_primitives::Address;

pub type Score = i32;

/// Starting score of an unknown provider.
pub const INITIAL: Score = 0;
/// A checkpoint of theirs was accepted on chain.
pub const CHECKPOINT_ACCEPTED: Score = 10;
/// They stopped heartbeating mid-epoch (dead, frozen or partitioned).
pub const PROVIDER_LOST: Score = -100;
/// The whole committee rejected their checkpoint (junk or cheating): slashed on chain too.
pub const CHECKPOINT_REJECTED: Score = -1000;
/// A quorum but not the whole committee rejected it: no slash, since one member saw it
/// honest. Byzantine members can cause this to an honest provider, so one alone must not
/// ban it; two do.
pub const CHECKPOINT_REJECTED_UNSLASHED: Score = -300;
/// Below this a provider's bids are not considered at all.
pub const BANNED_BELOW: Score = -500;
/// Scores are clamped so one long honest history cannot buy unlimited misbehaviour.
pub const MAX: Score = 500;
pub const MIN: Score = -10_000;

#[derive(Clone, Debug, Default)]
pub struct Reputation {
    scores: BTreeMap<Address, Score>,
}

impl Reputation {
    pub fn score(&self, who: &Address) -> Score {
        self.scores.get(who).copied().unwrap_or(INITIAL)
    }

    pub fn adjust(&mut self, who: Address, delta: Score) {
        let s = self.scores.entry(who).or_insert(INITIAL);
        *s = s.saturating_add(delta).clamp(MIN, MAX);
    }

    pub fn is_banned(&self, who: &Address) -> bool {
        self.score(who) < BANNED_BELOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanimous_rejection_bans_a_split_one_does_not() {
        let mut r = Reputation::default();
        let a = Address::repeat_byte(2);
        r.adjust(a, CHECKPOINT_REJECTED_UNSLASHED);
        assert!(!r.is_banned(&a));
        r.adjust(a, CHECKPOINT_REJECTED_UNSLASHED);
        assert!(r.is_banned(&a));
    }

    #[test]
    fn rejection_bans_loss_does_not() {
        let mut r = Reputation::default();
        let a = Address::repeat_byte(1);
        r.adjust(a, PROVIDER_LOST);
        assert!(!r.is_banned(&a));
        r.adjust(a, CHECKPOINT_REJECTED);
        assert!(r.is_banned(&a));
        for _ in 0..100 {
            r.adjust(a, CHECKPOINT_ACCEPTED);
        }
        assert_eq!(
            r.score(&a),
            MAX.min(PROVIDER_LOST + CHECKPOINT_REJECTED + 1000)
        );
    }
}
