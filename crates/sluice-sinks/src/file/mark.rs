//! The position mark beside a file written in a foreign envelope.
//!
//! Debezium's and CloudEvents' lines carry no Sluice position, so the file
//! cannot tell what it holds by its last line. After each batch is
//! fsynced, `<path>.position` records the file's length and the batch's
//! last position (written to a temporary file, fsynced and renamed, so it
//! is always whole). On open, anything past the recorded length is a batch
//! whose mark never landed: it is cut, and the coordinator sends it again.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sluice_core::Position;

use super::recover::Tail;

#[derive(Serialize, Deserialize)]
struct Mark {
    length: u64,
    position: Option<String>,
}

pub(super) fn mark_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".position");
    path.with_file_name(name)
}

/// Cuts what the mark does not cover and returns what the file holds.
pub(super) fn recover_marked(path: &Path, file: &mut File) -> Result<Tail, String> {
    let length = file.metadata().map_err(|e| format!("cannot stat: {e}"))?.len();
    let mark_file = mark_path(path);
    let mark = match std::fs::read(&mark_file) {
        Ok(bytes) => serde_json::from_slice::<Mark>(&bytes)
            .map_err(|e| format!("its position mark {} is not readable: {e}", mark_file.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if length > 0 {
                return Err(format!(
                    "it holds {length} bytes but has no position mark ({}), so the sink cannot tell what it holds; \
                     move the file away or point the sink at a new one",
                    mark_file.display()
                ));
            }
            write_mark(path, 0, None)?;
            return Ok(Tail::Empty);
        }
        Err(e) => return Err(format!("cannot read its position mark {}: {e}", mark_file.display())),
    };
    if length < mark.length {
        return Err(format!(
            "it is shorter ({length} bytes) than its position mark says it was ({} bytes); it was cut by hand",
            mark.length
        ));
    }
    if length > mark.length {
        file.set_len(mark.length).map_err(|e| format!("cannot cut a batch whose mark never landed: {e}"))?;
        file.sync_all().map_err(|e| format!("cannot fsync after cutting: {e}"))?;
    }
    match mark.position {
        None => Ok(Tail::Empty),
        Some(text) => text
            .parse::<Position>()
            .map(Tail::Holds)
            .map_err(|e| format!("its position mark names no position ({text:?}): {e}")),
    }
}

pub(super) fn write_mark(path: &Path, length: u64, position: Option<&Position>) -> Result<(), String> {
    let target = mark_path(path);
    let mut temporary = target.clone().into_os_string();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let mark = Mark { length, position: position.map(ToString::to_string) };
    let bytes = serde_json::to_vec(&mark).map_err(|e| e.to_string())?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)
        .map_err(|e| format!("cannot write {}: {e}", temporary.display()))?;
    file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(|e| format!("cannot write the mark: {e}"))?;
    std::fs::rename(&temporary, &target).map_err(|e| format!("cannot put the mark in place: {e}"))?;
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("cannot fsync {}: {e}", dir.display()))?;
    }
    Ok(())
}
