//! Node logs as data. With `--log-format json` every line a node writes is one JSON object
//! from tracing-subscriber; the machine-readable ones have target `gpuchain::event` and the
//! typed event ([`NodeEvent`]) as JSON in `data`. Readers get them back typed, as [`Logged`]
//! (the event and when it was written), and match on the enum: a renamed event or field is
//! a compile error here, not a wait that silently never matches. Of the line's own fields
//! only the `timestamp` is read here ([`line_time`]); [`node_event`] checks the `target`.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
pub use gpuchain_api::NodeEvent;
pub use gpuchain_api::events::EVENT_TARGET;
use serde_json::Value;

/// One of a node's events as read back from its log: what happened, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    /// When the node wrote the line (its `timestamp`).
    pub at: SystemTime,
    pub event: NodeEvent,
}

impl Logged {
    /// The event of a JSON log line; `None` for any other line, and for an event line
    /// without a readable timestamp (the node's JSON logger always writes one).
    pub fn from_line(line: &Value) -> Option<Self> {
        Some(Self {
            at: line_time(line)?,
            event: node_event(line)?,
        })
    }

    /// [`Logged::at`] as microseconds since the Unix epoch, for arithmetic across processes.
    pub fn micros(&self) -> Result<u64> {
        unix_micros(self.at)
    }
}

/// The typed event of a log line, if it is one.
pub fn node_event(line: &Value) -> Option<NodeEvent> {
    NodeEvent::from_line(line)
}

/// When the node wrote a log line: its `timestamp`, RFC 3339 in UTC as tracing-subscriber
/// writes it (microsecond precision). The one field of the line itself, rather than of the
/// event, that readers need.
pub fn line_time(line: &Value) -> Option<SystemTime> {
    let text = line.get("timestamp")?.as_str()?;
    parse_rfc3339(text)
}

fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(SystemTime::from)
}

/// A predicate on logged events (for [`crate::Testnet::wait_event`] and filters): the event
/// is the named [`NodeEvent`] variant, optionally with a condition on its fields:
/// `event_is!(ProviderLost)`, `event_is!(QualityTest { pass, .. } if *pass)`.
#[macro_export]
macro_rules! event_is {
    ($variant:ident) => {
        |e: &$crate::Logged| matches!(&e.event, $crate::NodeEvent::$variant { .. })
    };
    ($variant:ident $fields:tt if $cond:expr) => {
        |e: &$crate::Logged| matches!(&e.event, $crate::NodeEvent::$variant $fields if $cond)
    };
}

/// `pred`, limited to events written at or after `since` (e.g. [`crate::NodeProc::started_at`],
/// to skip earlier runs of a restarted node, whose lines stay in the same log).
pub fn after(since: SystemTime, pred: impl Fn(&Logged) -> bool) -> impl Fn(&Logged) -> bool {
    move |e| e.at >= since && pred(e)
}

/// Every line of the log at `path` that is a JSON object, in order. Other lines (a panic
/// message, a line still being written) are skipped; a missing log has no lines.
pub fn read_log(path: &Path) -> Result<Vec<Value>> {
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect())
}

/// Every event in the log at `path`, in order.
pub fn read_events(path: &Path) -> Result<Vec<Logged>> {
    Ok(read_log(path)?
        .iter()
        .filter_map(Logged::from_line)
        .collect())
}

/// A log read as it grows: each [`LogTail::read_new`] returns the events written since the
/// last, whole lines only (a line still being written is read next time). For readers that
/// poll often (the dashboard, benches), where reading the whole log each time would cost more
/// than the nodes they watch.
#[derive(Debug, Clone)]
pub struct LogTail {
    path: std::path::PathBuf,
    /// Bytes already read.
    offset: u64,
}

impl LogTail {
    /// Reads `path` from its start.
    pub fn new(path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            path: path.into(),
            offset: 0,
        }
    }

    /// The same log, read from where `self` left it, under a (possibly) new path.
    pub fn moved_to(&self, path: impl Into<std::path::PathBuf>) -> Self {
        Self {
            path: path.into(),
            offset: self.offset,
        }
    }

    /// The events of the lines written since the last call. A log that is missing or
    /// unreadable for now has none.
    pub fn read_new(&mut self) -> Vec<Logged> {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        self.offset += end as u64 + 1;
        buf[..end]
            .split(|b| *b == b'\n')
            .filter_map(|raw| serde_json::from_slice::<Value>(raw).ok())
            .filter_map(|v| Logged::from_line(&v))
            .collect()
    }
}

/// Microseconds since the Unix epoch.
pub fn unix_micros(t: SystemTime) -> Result<u64> {
    let d = t
        .duration_since(UNIX_EPOCH)
        .context("time before the Unix epoch")?;
    u64::try_from(d.as_micros()).context("time too far in the future")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use serde_json::json;

    fn micros(s: &str) -> u64 {
        unix_micros(parse_rfc3339(s).expect(s)).expect("after epoch")
    }

    #[test]
    fn parses_the_timestamps_loggers_write() {
        assert_eq!(micros("1970-01-01T00:00:00Z"), 0);
        assert_eq!(micros("1970-01-01T00:00:01.5Z"), 1_500_000);
        // 2024-02-29 (a leap day) 12:34:56.123456 UTC = 1709210096.123456
        assert_eq!(micros("2024-02-29T12:34:56.123456Z"), 1_709_210_096_123_456);
        assert_eq!(
            micros("2024-02-29T14:34:56.123456789+02:00"),
            1_709_210_096_123_456
        );
        assert_eq!(micros("2000-03-01T00:00:00Z"), 951_868_800_000_000);
        for bad in [
            "",
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:34:56",
            "2024-02-29T12:34:56.Z",
            "2024-02-29T12:34:56+0200",
            "yyyy-02-29T12:34:56Z",
        ] {
            assert!(parse_rfc3339(bad).is_none(), "{bad}");
        }
    }

    fn line(ev: &NodeEvent, timestamp: Option<&str>) -> Value {
        let (name, data) = ev.to_fields();
        let mut line = json!({"target": EVENT_TARGET, "event": name, "data": data});
        if let Some(t) = timestamp {
            line["timestamp"] = json!(t);
        }
        line
    }

    #[test]
    fn events_come_back_typed_with_their_time() {
        let lost = NodeEvent::ProviderLost {
            job_id: "3".into(),
            epoch: 2,
            provider: "0xab".into(),
            silent_for_ms: 70,
            reason: "lost".into(),
        };
        let l = Logged::from_line(&line(&lost, Some("1970-01-01T00:00:02Z"))).expect("event");
        assert_eq!(l.event, lost);
        assert_eq!(l.micros().expect("micros"), 2_000_000);
        assert!(event_is!(ProviderLost)(&l));
        assert!(event_is!(ProviderLost { epoch, .. } if *epoch == 2)(&l));
        assert!(!event_is!(ProviderLost { epoch, .. } if *epoch == 3)(&l));
        assert!(!event_is!(Started)(&l));
        let t1 = UNIX_EPOCH + Duration::from_secs(1);
        let t3 = UNIX_EPOCH + Duration::from_secs(3);
        assert!(after(t1, event_is!(ProviderLost))(&l));
        assert!(!after(t3, event_is!(ProviderLost))(&l));

        // Not events: no timestamp, another target, no typed data.
        assert_eq!(Logged::from_line(&line(&lost, None)), None);
        let mut other = line(&lost, Some("1970-01-01T00:00:02Z"));
        other["target"] = json!("gpuchain_node::api");
        assert_eq!(Logged::from_line(&other), None);
        let untyped = json!({"timestamp": "1970-01-01T00:00:02Z", "target": EVENT_TARGET, "event": "started"});
        assert_eq!(Logged::from_line(&untyped), None);
    }

    #[test]
    fn reads_only_json_lines_and_their_events() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("n.log");
        let ev = line(&NodeEvent::Signal, Some("2024-02-29T12:34:56.123456Z"));
        std::fs::write(
            &path,
            format!("{{\"a\":1}}\nthread 'main' panicked\n{ev}\n{{\"partial\":"),
        )
        .expect("write");
        let lines = read_log(&path).expect("read");
        assert_eq!(lines, vec![json!({"a": 1}), ev]);
        let events = read_events(&path).expect("events");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event, NodeEvent::Signal);
        assert_eq!(events[0].micros().expect("micros"), 1_709_210_096_123_456);
        assert!(
            read_log(&dir.path().join("none"))
                .expect("missing")
                .is_empty()
        );
    }
}
