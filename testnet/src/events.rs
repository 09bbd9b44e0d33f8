//! Node logs as data. With `--log-format json` every line a node writes is one JSON object
//! from tracing-subscriber; the machine-readable ones have target `gpuchain::event`, the
//! event's name in `event` and the typed event ([`NodeEvent`]) as JSON in `data`. Readers
//! should match on [`node_event`]; [`read_log`] also lifts the event's fields to the top of
//! its line, so older field lookups keep working. The node flattens fields into the top level
//! today; tracing-subscriber's unflattened layout nests them under `fields`, so lookups here
//! accept both and tests do not break if the node's logging setup changes.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
pub use gpuchain_api::NodeEvent;
pub use gpuchain_api::events::EVENT_TARGET;
use serde_json::Value;

/// The typed event of a log line, if it is one.
pub fn node_event(line: &Value) -> Option<NodeEvent> {
    NodeEvent::from_line(line)
}

/// A predicate on log lines (for [`crate::Testnet::wait_event`] and filters): the typed
/// event of the line is the named [`NodeEvent`] variant, optionally with a condition on
/// its fields: `event_is!(ProviderLost)`, `event_is!(QualityTest { pass, .. } if *pass)`.
#[macro_export]
macro_rules! event_is {
    ($variant:ident) => {
        |line: &serde_json::Value| {
            matches!(
                $crate::node_event(line),
                Some($crate::NodeEvent::$variant { .. })
            )
        }
    };
    ($variant:ident $fields:tt if $cond:expr) => {
        |line: &serde_json::Value| {
            matches!(
                &$crate::node_event(line),
                Some($crate::NodeEvent::$variant $fields) if $cond
            )
        }
    };
}

/// Copies the fields of the event in `data` onto the line itself (without overwriting).
fn lift_event_fields(mut line: Value) -> Value {
    let data = line
        .get(gpuchain_api::events::DATA_FIELD)
        .or_else(|| {
            line.get("fields")
                .and_then(|f| f.get(gpuchain_api::events::DATA_FIELD))
        })
        .and_then(Value::as_str)
        .and_then(|d| serde_json::from_str::<Value>(d).ok());
    if let (Some(Value::Object(fields)), Some(obj)) = (data, line.as_object_mut()) {
        for (k, v) in fields {
            obj.entry(k).or_insert(v);
        }
    }
    line
}

/// Every line of the log at `path` that is a JSON object, in order. Other lines (a panic
/// message, a line still being written) are skipped.
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
        .map(lift_event_fields)
        .collect())
}

/// A field of a log line, whether flattened into the top level or nested under `fields`.
pub fn field<'a>(line: &'a Value, key: &str) -> Option<&'a Value> {
    line.get(key)
        .or_else(|| line.get("fields").and_then(|f| f.get(key)))
}

/// A string field of a log line (see [`field`]).
pub fn field_str<'a>(line: &'a Value, key: &str) -> Option<&'a str> {
    field(line, key).and_then(Value::as_str)
}

/// The event name of a `gpuchain::event` line; `None` for any other line.
pub fn event_name(line: &Value) -> Option<&str> {
    if line.get("target").and_then(Value::as_str) != Some(EVENT_TARGET) {
        return None;
    }
    field_str(line, "event")
}

/// A predicate for [`crate::Testnet::wait_event`]: the `gpuchain::event` named `name`.
pub fn is_event(name: &str) -> impl Fn(&Value) -> bool + '_ {
    move |line| event_name(line) == Some(name)
}

/// `pred`, limited to lines written at or after `since` (e.g. [`crate::NodeProc::started_at`],
/// to skip earlier runs of a restarted node, whose lines stay in the same log).
pub fn after(since: SystemTime, pred: impl Fn(&Value) -> bool) -> impl Fn(&Value) -> bool {
    move |line| event_time(line).is_some_and(|t| t >= since) && pred(line)
}

/// When the node wrote the line (its `timestamp`, RFC 3339 in UTC as tracing-subscriber
/// writes it, microsecond precision).
pub fn event_time(line: &Value) -> Option<SystemTime> {
    line.get("timestamp")
        .and_then(Value::as_str)
        .and_then(parse_rfc3339)
}

/// [`event_time`] as microseconds since the Unix epoch, for arithmetic across processes.
pub fn event_micros(line: &Value) -> Option<u64> {
    event_time(line).and_then(|t| unix_micros(t).ok())
}

/// Microseconds since the Unix epoch.
pub fn unix_micros(t: SystemTime) -> Result<u64> {
    let d = t
        .duration_since(UNIX_EPOCH)
        .context("time before the Unix epoch")?;
    u64::try_from(d.as_micros()).context("time too far in the future")
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, the shape tracing-subscriber and
/// most JSON loggers write. No calendar crate is in the workspace, and this is all we need.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // 60 is a leap second; it folds into the next minute like most parsers do.
    if second > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos: u64 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        for (i, c) in frac.bytes().take(digits).enumerate() {
            if i < 9 {
                nanos = nanos * 10 + u64::from(c - b'0');
            }
        }
        for _ in digits..9 {
            nanos *= 10;
        }
        rest = &frac[digits..];
    }
    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let tz = rest.get(1..)?;
            let (h, m) = tz.split_once(':')?;
            if h.len() != 2 || m.len() != 2 {
                return None;
            }
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs) + Duration::from_nanos(nanos))
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn micros(s: &str) -> u64 {
        unix_micros(parse_rfc3339(s).expect(s)).expect("after epoch")
    }

    #[test]
    fn parses_the_formats_loggers_write() {
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

    #[test]
    fn fields_flat_or_nested() {
        let flat = json!({"timestamp": "1970-01-01T00:00:02Z", "target": EVENT_TARGET, "event": "started"});
        let nested = json!({"target": EVENT_TARGET, "fields": {"event": "started", "peer": "x"}});
        let other = json!({"target": "gpuchain_node::api", "event": "started"});
        assert_eq!(event_name(&flat), Some("started"));
        assert_eq!(event_name(&nested), Some("started"));
        assert_eq!(event_name(&other), None);
        assert!(is_event("started")(&nested));
        assert_eq!(field_str(&nested, "peer"), Some("x"));
        assert_eq!(event_micros(&flat), Some(2_000_000));
        let t1 = UNIX_EPOCH + Duration::from_secs(1);
        let t3 = UNIX_EPOCH + Duration::from_secs(3);
        assert!(after(t1, is_event("started"))(&flat));
        assert!(!after(t3, is_event("started"))(&flat));
        assert!(!after(t1, is_event("started"))(&nested), "no timestamp");
    }

    #[test]
    fn typed_events_are_read_back_and_their_fields_lifted() {
        let ev = NodeEvent::ProviderLost {
            job_id: "3".into(),
            epoch: 2,
            provider: "0xab".into(),
            silent_for_ms: 70,
        };
        let (name, data) = ev.to_fields();
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("n.log");
        let line = json!({"target": EVENT_TARGET, "event": name, "data": data});
        std::fs::write(&path, format!("{line}\n")).expect("write");
        let lines = read_log(&path).expect("read");
        assert_eq!(node_event(&lines[0]), Some(ev));
        assert_eq!(field(&lines[0], "epoch"), Some(&json!(2)));
        assert!(is_event("provider_lost")(&lines[0]));
    }

    #[test]
    fn reads_only_json_lines() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("n.log");
        std::fs::write(
            &path,
            "{\"a\":1}\nthread 'main' panicked\n{\"b\":2}\n{\"partial\":",
        )
        .expect("write");
        let lines = read_log(&path).expect("read");
        assert_eq!(lines, vec![json!({"a": 1}), json!({"b": 2})]);
        assert!(
            read_log(&dir.path().join("none"))
                .expect("missing")
                .is_empty()
        );
    }
}
