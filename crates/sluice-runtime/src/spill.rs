//! Spill files: the events of one batch that outgrew `max_bytes`.
//!
//! With `respect_source_tx`, a source transaction larger than the batch
//! limits becomes one batch. Rather than grow the heap without bound, the
//! batcher writes such a batch to a file under the data dir, and each sink
//! writer reads it back in chunks. Spill files are scratch: never fsynced,
//! deleted when the batch is dropped, and the whole folder is cleared when
//! a pipeline starts (a crash leaves them behind; the source re-reads the
//! transaction anyway, since it was never checkpointed).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sluice_core::Event;
use sluice_core::codec::{self, CodecError};

/// Events handed to a sink per chunk when reading a spill file back.
pub const SPILL_CHUNK_EVENTS: usize = 1024;

#[derive(Debug, thiserror::Error)]
#[error("spill file {path}: {detail}; hint: free space on the disk of --data-dir, or raise batch.max_bytes")]
pub struct SpillError {
    pub path: String,
    pub detail: String,
}

fn spill_error(path: &Path, detail: impl std::fmt::Display) -> SpillError {
    SpillError { path: path.display().to_string(), detail: detail.to_string() }
}

pub struct SpillWriter {
    path: PathBuf,
    out: BufWriter<File>,
    record: Vec<u8>,
    event_count: usize,
}

impl SpillWriter {
    pub fn create(dir: &Path, batch_seq: u64) -> Result<Self, SpillError> {
        std::fs::create_dir_all(dir).map_err(|e| spill_error(dir, format!("cannot create the folder: {e}")))?;
        let path = dir.join(format!("batch-{batch_seq}.spill"));
        let file = File::create(&path).map_err(|e| spill_error(&path, format!("cannot create: {e}")))?;
        Ok(Self { out: BufWriter::with_capacity(256 * 1024, file), path, record: Vec::new(), event_count: 0 })
    }

    pub fn push(&mut self, event: &Event) -> Result<(), SpillError> {
        self.record.clear();
        codec::encode(event, &mut self.record);
        let len = u32::try_from(self.record.len()).map_err(|_| spill_error(&self.path, "one event exceeds 4 GiB"))?;
        self.out
            .write_all(&len.to_le_bytes())
            .and_then(|()| self.out.write_all(&self.record))
            .map_err(|e| spill_error(&self.path, format!("write failed: {e}")))?;
        self.event_count += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Result<SpillFile, SpillError> {
        self.out.flush().map_err(|e| spill_error(&self.path, format!("write failed: {e}")))?;
        Ok(SpillFile { path: std::mem::take(&mut self.path), event_count: self.event_count })
    }
}

impl Drop for SpillWriter {
    fn drop(&mut self) {
        // Only a writer that was never finished still has its path.
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A finished spill file; deleted when dropped.
#[derive(Debug)]
pub struct SpillFile {
    path: PathBuf,
    event_count: usize,
}

impl SpillFile {
    pub fn event_count(&self) -> usize {
        self.event_count
    }

    pub fn reader(&self) -> Result<SpillReader, SpillError> {
        let file = File::open(&self.path).map_err(|e| spill_error(&self.path, format!("cannot open: {e}")))?;
        Ok(SpillReader {
            input: BufReader::with_capacity(256 * 1024, file),
            path: self.path.clone(),
            record: Vec::new(),
            remaining: self.event_count,
        })
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub struct SpillReader {
    input: BufReader<File>,
    path: PathBuf,
    record: Vec<u8>,
    remaining: usize,
}

impl SpillReader {
    /// Appends up to `max` events to `out`; appends none at the end.
    pub fn read_chunk(&mut self, out: &mut Vec<Event>, max: usize) -> Result<(), SpillError> {
        let mut read = 0;
        while read < max && self.remaining > 0 {
            let mut len = [0; 4];
            self.input.read_exact(&mut len).map_err(|e| spill_error(&self.path, format!("read failed: {e}")))?;
            self.record.resize(u32::from_le_bytes(len) as usize, 0);
            self.input
                .read_exact(&mut self.record)
                .map_err(|e| spill_error(&self.path, format!("read failed: {e}")))?;
            let mut bytes = self.record.as_slice();
            let event = codec::decode(&mut bytes).map_err(|e: CodecError| spill_error(&self.path, e))?;
            out.push(event);
            read += 1;
            self.remaining -= 1;
        }
        Ok(())
    }
}
