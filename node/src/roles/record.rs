//! The run record's side of the role runtime: each message the machines publish, each notice
//! they raise and each escrow event they see, written as the node's typed event.

use gpuchain_protocol::detector::Suspicion;
use gpuchain_protocol::{ChainEvent, Message, Notice};

use crate::events::NodeEvent;

pub fn published(m: &Message) {
    match m {
        Message::JobOffer(o) => crate::events::emit(
            NodeEvent::OfferPublished {
                job_id: o.job_id.to_string(),
                next_epoch: o.next_epoch,
            },
            "job offered",
        ),
        Message::Bid(b) => crate::events::emit(
            NodeEvent::BidPublished {
                job_id: b.job_id.to_string(),
                epoch: b.epoch,
                price_per_step: b.price_per_step.to_string(),
            },
            "bid",
        ),
        Message::CheckpointAnnounce(a) => crate::events::emit(
            NodeEvent::CheckpointAnnounced {
                job_id: a.job_id.to_string(),
                epoch: a.epoch,
                step: a.step,
                parent_step: a.parent_step,
                checkpoint: a.checkpoint_hash.to_string(),
            },
            "checkpoint announced",
        ),
        Message::Vote(v) => crate::events::emit(
            NodeEvent::VotePublished {
                job_id: v.job_id.to_string(),
                epoch: v.epoch,
                step: v.step,
                accept: v.accept,
                checkpoint: v.checkpoint_hash.to_string(),
            },
            "vote",
        ),
        Message::Heartbeat(_) | Message::NodeHello(_) => {}
    }
}

pub fn notice(n: &Notice) {
    match n {
        Notice::ProviderSelected {
            job_id,
            epoch,
            provider,
            price_per_step,
        } => crate::events::emit(
            NodeEvent::ProviderSelected {
                job_id: job_id.to_string(),
                epoch: *epoch,
                provider: provider.to_string(),
                price_per_step: price_per_step.to_string(),
            },
            "provider selected",
        ),
        Notice::ProviderLost {
            job_id,
            epoch,
            provider,
            silent_for,
            reason,
        } => crate::events::emit(
            NodeEvent::ProviderLost {
                job_id: job_id.to_string(),
                epoch: *epoch,
                provider: provider.to_string(),
                silent_for_ms: silent_for.as_millis() as u64,
                reason: reason.as_str().to_string(),
            },
            match reason {
                Suspicion::Lost => "provider lost",
                Suspicion::Stalled => "provider stalled: heartbeating but making no progress",
            },
        ),
        Notice::NoUsableBids { job_id, epoch } => crate::events::emit(
            NodeEvent::NoUsableBids {
                job_id: job_id.to_string(),
                epoch: *epoch,
            },
            "no usable bid yet; offering again",
        ),
        Notice::QuorumReached {
            job_id,
            epoch,
            step,
            accept,
        } => crate::events::emit(
            NodeEvent::Quorum {
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                accept: *accept,
            },
            "verifier quorum",
        ),
        Notice::Voted {
            job_id,
            epoch,
            step,
            accept,
        } => crate::events::emit(
            NodeEvent::Voted {
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                accept: *accept,
            },
            "voted",
        ),
        Notice::Fenced { job_id, epoch } => crate::events::emit(
            NodeEvent::Fenced {
                job_id: job_id.to_string(),
                epoch: *epoch,
            },
            "our epoch was fenced; training stopped",
        ),
        Notice::JobFinished { job_id } => crate::events::emit(
            NodeEvent::JobFinished {
                job_id: job_id.to_string(),
            },
            "job finished",
        ),
        Notice::TxFailed { id, reason } => crate::events::emit(
            NodeEvent::TxFailed {
                tx: id.0,
                reason: reason.to_string(),
            },
            "transaction failed",
        ),
        Notice::TrainerInconsistent {
            job_id,
            epoch,
            step,
        } => crate::events::emit(
            NodeEvent::TrainerInconsistent {
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
            },
            "trainer reported an inconsistent interval",
        ),
        Notice::UnknownJob { job_id } => crate::events::emit(
            NodeEvent::UnknownJob {
                job_id: job_id.to_string(),
            },
            "assigned to a job whose spec this node never saw",
        ),
        Notice::ClaimSubmitted {
            job_id,
            epoch,
            step,
            late,
        } => crate::events::emit(
            NodeEvent::ClaimSubmitted {
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                late: *late,
            },
            "submitting the accept of our own checkpoint",
        ),
        Notice::BidRefused {
            job_id,
            rule,
            detail,
        } => crate::events::emit(
            NodeEvent::BidRefused {
                job_id: job_id.to_string(),
                rule: rule.name().to_string(),
                detail: detail.clone(),
            },
            &if detail.is_empty() {
                "not bidding: the job's terms break a rule of this provider".to_string()
            } else {
                format!("not bidding: {detail}")
            },
        ),
    }
}

pub fn chain_event(e: &ChainEvent, block: u64) {
    match e {
        ChainEvent::JobCreated {
            job_id,
            client,
            budget,
            ..
        } => crate::events::emit(
            NodeEvent::ChainJobCreated {
                block,
                job_id: job_id.to_string(),
                client: client.to_string(),
                budget: budget.to_string(),
            },
            "job created on chain",
        ),
        ChainEvent::CommitteeDrawn {
            job_id, committee, ..
        } => crate::events::emit(
            NodeEvent::ChainCommitteeDrawn {
                block,
                job_id: job_id.to_string(),
                committee: committee.iter().map(ToString::to_string).collect(),
            },
            "verifier committee drawn",
        ),
        ChainEvent::CommitteeSeedMoved { job_id, seed_block } => crate::events::emit(
            NodeEvent::ChainSeedMoved {
                block,
                job_id: job_id.to_string(),
                seed_block: *seed_block,
            },
            "committee seed moved; the draw comes on the next call",
        ),
        ChainEvent::ProviderAssigned {
            job_id,
            epoch,
            provider,
            price_per_step,
            start_step,
            ..
        } => crate::events::emit(
            NodeEvent::ChainAssigned {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                provider: provider.to_string(),
                price_per_step: price_per_step.to_string(),
                start_step: *start_step,
            },
            "provider assigned",
        ),
        ChainEvent::EpochEnded {
            job_id,
            epoch,
            reason,
        } => crate::events::emit(
            NodeEvent::ChainEpochEnded {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                reason: format!("{:?}", reason),
            },
            "epoch ended",
        ),
        ChainEvent::CheckpointAccepted {
            job_id,
            epoch,
            step,
            provider,
            amount,
            voters,
            fees,
            ..
        } => crate::events::emit(
            NodeEvent::ChainAccepted {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                provider: provider.to_string(),
                amount: amount.to_string(),
                fees: fees.to_string(),
                voters: format!("{voters:#x}"),
            },
            "checkpoint accepted",
        ),
        ChainEvent::CheckpointRejected {
            job_id,
            epoch,
            step,
            provider,
            slashed,
            voters,
            fees,
            ..
        } => crate::events::emit(
            NodeEvent::ChainRejected {
                block,
                job_id: job_id.to_string(),
                epoch: *epoch,
                step: *step,
                provider: provider.to_string(),
                slashed: slashed.to_string(),
                fees: fees.to_string(),
                voters: format!("{voters:#x}"),
            },
            "checkpoint rejected",
        ),
        ChainEvent::JobCompleted { job_id, refund } => crate::events::emit(
            NodeEvent::ChainCompleted {
                block,
                job_id: job_id.to_string(),
                refund: refund.to_string(),
            },
            "job completed",
        ),
        ChainEvent::JobExpired { job_id, refund } => crate::events::emit(
            NodeEvent::ChainExpired {
                block,
                job_id: job_id.to_string(),
                refund: refund.to_string(),
            },
            "job expired",
        ),
        ChainEvent::JobSettled { job_id, refund, .. } => crate::events::emit(
            NodeEvent::ChainSettled {
                block,
                job_id: job_id.to_string(),
                refund: refund.to_string(),
            },
            "job settled",
        ),
    }
}
