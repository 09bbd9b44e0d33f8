//! Gossipsub topic names. Offers go to one global topic; everything about a running job
//! (bids, heartbeats, checkpoints, votes) to that job's topic, so only interested peers carry it.

use crate::types::JobId;
use crate::wire::Message;

pub const JOBS_TOPIC: &str = "gpuchain/1/jobs";
pub const HELLO_TOPIC: &str = "gpuchain/1/hello";

pub fn job_topic(job_id: JobId) -> String {
    format!("gpuchain/1/job/{job_id}")
}

/// The topic a message belongs on.
pub fn topic_for(msg: &Message) -> String {
    match msg {
        Message::NodeHello(_) => HELLO_TOPIC.to_owned(),
        Message::JobOffer(_) => JOBS_TOPIC.to_owned(),
        Message::Bid(b) => job_topic(b.job_id),
        Message::Heartbeat(h) => job_topic(h.job_id),
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
}
