//! Gossip topic names: the protocol crate's, plus the checks the API applies to topics it
//! is handed.

use anyhow::{Result, bail};
pub use gpuchain_protocol::topics::{
    HELLO_TOPIC, JOBS_TOPIC, heartbeat_topic, job_topic, topic_for,
};
use gpuchain_protocol::types::JobId;

/// Prefix of the per-job topics (bids, checkpoint announcements, votes).
pub const JOB_TOPIC_PREFIX: &str = "gpuchain/1/job/";
/// What follows a job topic to make its heartbeat topic.
pub const HEARTBEAT_SUFFIX: &str = "/heartbeats";

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

/// The job id of a job's heartbeat topic (`gpuchain/1/job/<decimal id>/heartbeats`).
pub fn heartbeat_job_of(topic: &str) -> Option<JobId> {
    job_id_of(topic.strip_suffix(HEARTBEAT_SUFFIX)?)
}

/// The heartbeat topic a caller names by it or, for short, by its job's topic.
pub fn heartbeat_topic_of(topic: &str) -> Result<String> {
    if let Some(job) = heartbeat_job_of(topic).or_else(|| job_id_of(topic)) {
        return Ok(heartbeat_topic(job));
    }
    bail!(
        "heartbeats go on a job's heartbeat topic ({JOB_TOPIC_PREFIX}<decimal job id>{HEARTBEAT_SUFFIX}); {topic:?} is not one"
    )
}

/// A topic this node may publish or subscribe to: the jobs or hello topic, a job's topic or
/// a job's heartbeat topic.
pub fn check_topic(topic: &str) -> Result<()> {
    if topic == JOBS_TOPIC
        || topic == HELLO_TOPIC
        || job_id_of(topic).is_some()
        || heartbeat_job_of(topic).is_some()
    {
        return Ok(());
    }
    bail!(
        "topic {topic:?} is not a gpuchain topic: use {JOBS_TOPIC}, {HELLO_TOPIC}, {JOB_TOPIC_PREFIX}<decimal job id> or {JOB_TOPIC_PREFIX}<decimal job id>{HEARTBEAT_SUFFIX}"
    )
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
        assert!(job_id_of("gpuchain/1/job/42/heartbeats").is_none());
        assert!(check_topic("other").is_err());
    }

    #[test]
    fn heartbeat_topics() {
        let hb = heartbeat_topic(JobId::from(42));
        assert_eq!(hb, "gpuchain/1/job/42/heartbeats");
        assert!(check_topic(&hb).is_ok());
        assert_eq!(heartbeat_job_of(&hb), Some(JobId::from(42)));
        assert!(heartbeat_job_of("gpuchain/1/job/042/heartbeats").is_none());
        assert!(heartbeat_job_of("gpuchain/1/job/42/heartbeats/x").is_none());
        assert!(check_topic("gpuchain/1/job/42/other").is_err());
        // Named by its job topic or by itself, it is the same topic.
        assert_eq!(
            heartbeat_topic_of("gpuchain/1/job/42").expect("job topic"),
            hb
        );
        assert_eq!(heartbeat_topic_of(&hb).expect("heartbeat topic"), hb);
        assert!(heartbeat_topic_of(JOBS_TOPIC).is_err());
    }
}
