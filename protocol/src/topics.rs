//! Gossipsub topic names. Offers go to one global topic; everything about a running job (bids,
//! checkpoints, votes) to that job's topic, so only interested peers carry it. Heartbeats have
//! a topic of their own per job, which only the job's client subscribes to: it is the one role
//! that acts on them, and they are most of a job's traffic (a verifier on the job's topic
//! would receive every one and do nothing with it).

use crate::types::JobId;
use crate::wire::Message;

pub const JOBS_TOPIC: &str = "gpuchain/1/jobs";
pub const HELLO_TOPIC: &str = "gpuchain/1/hello";

pub fn job_topic(job_id: JobId) -> String {
    format!("gpuchain/1/job/{job_id}")
}

/// A job's heartbeats: the job's client subscribes (with its job topic); the provider
/// publishes there without subscribing, and verifiers stay off it.
pub fn heartbeat_topic(job_id: JobId) -> String {
    format!("gpuchain/1/job/{job_id}/heartbeats")
}

/// The topic a message belongs on.
pub fn topic_for(msg: &Message) -> String {
    match msg {
        Message::NodeHello(_) => HELLO_TOPIC.to_owned(),
        Message::JobOffer(_) => JOBS_TOPIC.to_owned(),
        Message::Bid(b) => job_topic(b.job_id),
        Message::Heartbeat(h) => heartbeat_topic(h.job_id),
        Message::CheckpointAnnounce(c) => job_topic(c.job_id),
        Message::Vote(v) => job_topic(v.job_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_topic_is_decimal_job_id() {
        assert_eq!(job_topic(JobId::from(42)), "gpuchain/1/job/42");
    }

    #[test]
    fn heartbeats_have_a_topic_of_their_own() {
        assert_eq!(
            heartbeat_topic(JobId::from(42)),
            "gpuchain/1/job/42/heartbeats"
        );
        assert_ne!(heartbeat_topic(JobId::from(42)), job_topic(JobId::from(42)));
    }
}
