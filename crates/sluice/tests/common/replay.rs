//! Reading a file sink's events back, and replaying them by key.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::wait_until;

/// The file's complete lines: a sink still writing may have left the last
/// one half-written, and it is read on the next look.
pub fn events(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split_inclusive('\n').filter_map(|l| l.strip_suffix('\n')).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A value as the database's text of it; `None` for NULL.
pub fn text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// Replays the file's events of `table` by key: reads, inserts and updates
/// set the row, deletes remove it, a truncate removes them all.
pub fn replayed(path: &Path, table: &str, key: &str, columns: &[&str]) -> BTreeMap<String, Vec<Option<String>>> {
    let mut state = BTreeMap::new();
    for event in events(path) {
        if event["table"] != table {
            continue;
        }
        match event["op"].as_str() {
            Some("t") => state.clear(),
            Some("r" | "c" | "u" | "d") => {}
            // Schema changes and messages hold no row.
            _ => continue,
        }
        let row = if event["op"] == "d" { &event["before"] } else { &event["after"] };
        let id = text(&row[key]).unwrap();
        if event["op"] == "d" {
            state.remove(&id);
        } else {
            state.insert(id, columns.iter().map(|c| text(&row[*c])).collect());
        }
    }
    state
}

/// Once the log says the snapshot is read, makes `write` insert a row with
/// note `marker` (so it streams, after every snapshot row) and waits until
/// the file holds it.
pub fn marker_after_snapshot(dir: &Path, write: impl FnOnce()) {
    wait_until(Duration::from_secs(300), "the snapshot to be read", || {
        std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default().contains("snapshot done")
    });
    write();
    wait_until(Duration::from_secs(300), "the marker row", || has_marker(&dir.join("out.jsonl")));
}

pub fn has_marker(path: &Path) -> bool {
    std::fs::read_to_string(path).unwrap_or_default().contains("\"note\":\"marker\"")
}
