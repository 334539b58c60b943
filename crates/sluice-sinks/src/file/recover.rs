//! Finding the last whole line of a JSON Lines file and cutting a torn tail.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use serde_json::Value as Json;
use sluice_core::Position;

/// How far back one read step goes while looking for a line start.
const TAIL_CHUNK: u64 = 64 * 1024;

pub(super) enum Tail {
    /// The file is empty (after cutting a torn first line).
    Empty,
    /// The position in the last whole line.
    Holds(Position),
}

/// Cuts anything after the last newline (a write torn by a crash), then
/// returns the position in the last whole line.
pub(super) fn recover(file: &mut File) -> Result<Tail, String> {
    let len = file.metadata().map_err(|e| format!("cannot stat: {e}"))?.len();
    let end_of_whole_lines = match find_newline_before(file, len)? {
        Some(newline) => newline + 1,
        None => 0,
    };
    if end_of_whole_lines < len {
        file.set_len(end_of_whole_lines).map_err(|e| format!("cannot cut the torn last line: {e}"))?;
        file.sync_all().map_err(|e| format!("cannot fsync after cutting the torn last line: {e}"))?;
    }
    if end_of_whole_lines == 0 {
        return Ok(Tail::Empty);
    }
    let line_start = match find_newline_before(file, end_of_whole_lines - 1)? {
        Some(newline) => newline + 1,
        None => 0,
    };
    let mut line = vec![0; (end_of_whole_lines - 1 - line_start) as usize];
    file.seek(SeekFrom::Start(line_start)).map_err(|e| format!("cannot seek: {e}"))?;
    file.read_exact(&mut line).map_err(|e| format!("cannot read the last line: {e}"))?;
    let position = serde_json::from_slice::<Json>(&line)
        .ok()
        .and_then(|json| json.get("position")?.as_str()?.parse::<Position>().ok())
        .ok_or_else(|| {
            format!(
                "its last line (byte {line_start}) is not a Sluice event with a position, so the sink cannot tell what it holds"
            )
        })?;
    Ok(Tail::Holds(position))
}

/// The offset of the last `\n` strictly before `end`, if any.
fn find_newline_before(file: &mut File, end: u64) -> Result<Option<u64>, String> {
    let mut chunk_end = end;
    let mut buf = Vec::new();
    while chunk_end > 0 {
        let chunk_start = chunk_end.saturating_sub(TAIL_CHUNK);
        buf.resize((chunk_end - chunk_start) as usize, 0);
        file.seek(SeekFrom::Start(chunk_start)).map_err(|e| format!("cannot seek: {e}"))?;
        file.read_exact(&mut buf).map_err(|e| format!("cannot read: {e}"))?;
        if let Some(index) = buf.iter().rposition(|b| *b == b'\n') {
            return Ok(Some(chunk_start + index as u64));
        }
        chunk_end = chunk_start;
    }
    Ok(None)
}
