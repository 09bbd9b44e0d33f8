//! Gossip topic names: the protocol crate's, plus the checks the API applies to topics it
//! is handed.

use anyhow::{Result, bail};
pub use gpuchain_protocol::topics::{HELLO_TOPIC, JOBS_TOPIC, job_topic, topic_for};
use gpuchain_protocol::types::JobId;

/// Prefix of the per-job topics (heartbeats, bids, checkpoint announcements, votes).
pub const JOB_TOPIC_PREFIX: &str = "gpuchain/1/job/";

/// The job id of a job topic (`gpuchain/1/job/<decimal id>`).
pub fn job_id_of(topic: &str) -> Option<JobId> {
    let id = topic.strip_prefix(JOB_TOPIC_PREFIX)?;
    if id.is_empty() || id.len() > 78 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let job = JobId::from_str_radix(id, 10).ok()?;
    // Only the canonical spelling, so that one job has exactly one topic.
    (job_topic(job) == topic).then_some(job)
}

/// A topic this node may publish or subscribe to: the jobs or hello topic or a job's topic.
pub fn check_topic(topic: &str) -> Result<()> {
    if topic == JOBS_TOPIC || topic == HELLO_TOPIC || job_id_of(topic).is_some() {
        return Ok(());
    }
    bail!(
        "topic {topic:?} is not a gpuchain topic: use {JOBS_TOPIC}, {HELLO_TOPIC} or {JOB_TOPIC_PREFIX}<decimal job id>"
    )
}

pub fn is_job_topic(topic: &str) -> bool {
    job_id_of(topic).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics() {
        assert!(check_topic(JOBS_TOPIC).is_ok());
        assert!(check_topic(HELLO_TOPIC).is_ok());
        assert_eq!(job_id_of("gpuchain/1/job/42"), Some(JobId::from(42)));
        assert!(job_id_of("gpuchain/1/job/042").is_none());
        assert!(job_id_of("gpuchain/1/job/x").is_none());
        assert!(job_id_of("gpuchain/1/job/").is_none());
        assert!(check_topic("other").is_err());
    }
}
