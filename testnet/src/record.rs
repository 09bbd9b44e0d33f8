//! The run record (`record.jsonl` in a run folder): every node's events and the harness's
//! own (faults it fired) merged in time order, one JSON object per line: the node's name,
//! the time in microseconds since the Unix epoch, and the event's fields as the node types
//! them (`{"node":"A","timestamp_us":…,"event":"first_step","job_id":"1",…}`). Readers get
//! [`RecordLine`]s back and match on the typed event.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::Testnet;
use crate::events::NodeEvent;
use crate::scenario::Action;

/// The file name of the run record in a run folder.
pub const RECORD_FILE: &str = "record.jsonl";
/// The `node` of the harness's own lines.
pub const HARNESS: &str = "harness";

/// One line of the run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordLine {
    /// The node that logged the event, or [`HARNESS`].
    pub node: String,
    /// Microseconds since the Unix epoch.
    pub timestamp_us: u64,
    #[serde(flatten)]
    pub event: Recorded,
}

/// What a record line says: a node's event or the harness's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Recorded {
    Node(NodeEvent),
    Harness(HarnessEvent),
}

/// What the harness itself did, for the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum HarnessEvent {
    /// A scenario's `[[fault]]` fired.
    ScenarioFault {
        action: Action,
        /// The node the fault hit.
        target_node: String,
        /// The last step the client had seen reported.
        at_step: u64,
        /// Seconds since the job was submitted.
        at_secs: f64,
    },
    /// A break-it control of the dashboard acted.
    Break {
        action: gpuchain_web::BreakAction,
        target_node: String,
    },
    /// A node's stake (base units, from the chain) and process state, where they changed.
    NodeStatus {
        target_node: String,
        stake: Option<String>,
        state: String,
    },
}

impl RecordLine {
    /// The node's event, when the line is one.
    pub fn node_event(&self) -> Option<&NodeEvent> {
        match &self.event {
            Recorded::Node(e) => Some(e),
            Recorded::Harness(_) => None,
        }
    }

    /// The harness's event, when the line is one.
    pub fn harness_event(&self) -> Option<&HarnessEvent> {
        match &self.event {
            Recorded::Harness(e) => Some(e),
            Recorded::Node(_) => None,
        }
    }
}

/// Merges every node's events and `extra` (the harness's) into one time-ordered record in
/// `run_dir`; returns its path.
pub fn write_record(net: &Testnet, run_dir: &Path, extra: &[RecordLine]) -> Result<PathBuf> {
    let mut all: Vec<RecordLine> = extra.to_vec();
    if let Some(b) = net.board() {
        all.extend(b.harness_lines());
    }
    for n in net.nodes() {
        for e in n.events()? {
            all.push(RecordLine {
                node: n.name().to_string(),
                timestamp_us: e.micros()?,
                event: Recorded::Node(e.event),
            });
        }
    }
    // Stable: lines of one node keep their log order within a microsecond.
    all.sort_by_key(|l| l.timestamp_us);
    let path = run_dir.join(RECORD_FILE);
    let mut text = String::new();
    for line in &all {
        text.push_str(&serde_json::to_string(line)?);
        text.push('\n');
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The record at `path`, every line typed; a line that is not a record line is an error
/// naming it.
pub fn read_record(path: &Path) -> Result<Vec<RecordLine>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| {
                format!("{} line {}: not a record line: {l}", path.display(), i + 1)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_lines_round_trip_flat() {
        let lines = [
            RecordLine {
                node: "A".into(),
                timestamp_us: 5,
                event: Recorded::Node(NodeEvent::FirstStep {
                    job_id: "1".into(),
                    epoch: 2,
                    step: 151,
                    loss: 0.5,
                }),
            },
            RecordLine {
                node: "client".into(),
                timestamp_us: 6,
                event: Recorded::Node(NodeEvent::CursorReset),
            },
            RecordLine {
                node: HARNESS.into(),
                timestamp_us: 7,
                event: Recorded::Harness(HarnessEvent::ScenarioFault {
                    action: Action::Stop,
                    target_node: "v3".into(),
                    at_step: 15,
                    at_secs: 2.5,
                }),
            },
        ];
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join(RECORD_FILE);
        let mut text = String::new();
        for l in &lines {
            let json = serde_json::to_value(l).expect("serialise");
            assert_eq!(json["node"], l.node.as_str());
            assert!(json["event"].is_string(), "flat: {json}");
            text.push_str(&format!("{json}\n"));
        }
        std::fs::write(&path, text).expect("write");
        let back = read_record(&path).expect("read");
        assert_eq!(back, lines);
        assert_eq!(back[0].node_event(), lines[0].node_event());
        assert!(back[2].node_event().is_none());
        assert!(back[2].harness_event().is_some());

        std::fs::write(
            &path,
            "{\"node\":\"A\",\"timestamp_us\":1,\"event\":\"nope\"}\n",
        )
        .expect("write");
        let err = read_record(&path).expect_err("unknown event");
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
    }
}
