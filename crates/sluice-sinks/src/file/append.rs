//! A batch's append, fsync and mark, run on a blocking thread while the
//! next batch encodes.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_core::sync::lock;
use sluice_core::{Position, failpoint};
use tokio::task::JoinHandle;

use super::mark::write_mark;

/// What one append is to do once its bytes are in the file.
pub(super) enum Then {
    /// Nothing: more of the same batch follows (a spilled batch).
    Continue,
    /// Fsync, and for a foreign envelope record the mark at `mark`.
    Finish { mark: Option<PathBuf> },
}

/// An append on its way: the batch it ends (none for part of a batch) and
/// when it began, which `flush_due` counts from.
pub(super) struct InFlight {
    task: JoinHandle<(Result<(), String>, Vec<u8>)>,
    pub(super) ends: Option<Position>,
    pub(super) started: Instant,
}

impl InFlight {
    /// Starts appending `buf` to the open file in `slot`.
    ///
    /// The mutex is held for the whole job, so `open` (which takes it to
    /// recover the file) runs after any append already started; and every
    /// caller waits for the job before starting another, so appends reach
    /// the file in order.
    pub(super) fn start(slot: Arc<Mutex<Option<File>>>, mut buf: Vec<u8>, then: Then, ends: Option<Position>) -> Self {
        let position = ends.clone();
        let task = tokio::task::spawn_blocking(move || {
            let mut guard = lock(&slot);
            let result = match guard.as_mut() {
                None => Err("the file is not open".to_string()),
                Some(file) => append(file, &buf, &then, position.as_ref()),
            };
            if result.is_err() {
                // A failed append may have left a partial line, or a batch
                // without its mark; `open` must recover before the next.
                *guard = None;
            }
            buf.clear();
            (result, buf)
        });
        Self { task, ends, started: Instant::now() }
    }

    /// Waits for the job; gives back its buffer, emptied, for reuse.
    /// Cancel-safe: dropped while waiting, the job stays where it was and
    /// can be waited for again.
    pub(super) async fn wait(&mut self) -> Result<(Result<(), String>, Vec<u8>), tokio::task::JoinError> {
        (&mut self.task).await
    }
}

fn append(file: &mut File, buf: &[u8], then: &Then, ends: Option<&Position>) -> Result<(), String> {
    file.write_all(buf).map_err(|e| e.to_string())?;
    let Then::Finish { mark } = then else { return Ok(()) };
    failpoint::hit("file.before_sync");
    file.sync_data().map_err(|e| e.to_string())?;
    if let Some(path) = mark {
        failpoint::hit("file.before_mark");
        let length = file.metadata().map_err(|e| e.to_string())?.len();
        write_mark(path, length, ends)?;
    }
    Ok(())
}
