use sluice_core::sync::lock;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_core::{EventChunks, Guarantee, Position, Sink, SinkError};

use sluice_format::{FormatConfig, RecordKind};

use crate::encoded::SharedEncoder;

use super::mark::{recover_marked, write_mark};
use super::recover::{Tail, recover};

pub struct FileSink {
    id: String,
    path: PathBuf,
    encoder: SharedEncoder,
    /// Behind a mutex that a blocking write holds until it finishes, so a
    /// recovery after a timed-out write waits for that write instead of
    /// racing it.
    file: Arc<Mutex<Option<File>>>,
    held: Option<Position>,
    buf: Vec<u8>,
}

impl FileSink {
    pub fn new(id: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self::with_format(id, path, &FormatConfig::default())
    }

    pub fn with_format(id: impl Into<String>, path: impl Into<PathBuf>, format: &FormatConfig) -> Self {
        let id = id.into();
        Self {
            encoder: SharedEncoder::new(format, super::FileSinkConfig::CARRIER, format!("file sink {id:?}")),
            id,
            path: path.into(),
            file: Arc::new(Mutex::new(None)),
            held: None,
            buf: Vec::new(),
        }
    }

    /// Native lines carry their position; other envelopes keep a mark.
    fn marked(&self) -> bool {
        !self.encoder.is_native()
    }

    fn permanent(&self, problem: String) -> SinkError {
        SinkError::permanent(
            format!("file sink {:?}: {}: {problem}", self.id, self.path.display()),
            "check the path and its permissions, or point the sink at a new file",
        )
    }
}

/// Encoded bytes gathered before an append, when a batch comes in chunks.
const APPEND_BYTES: usize = 4 * 1024 * 1024;

impl FileSink {
    /// Appends the buffer, and with `sync` fsyncs the file.
    /// Returns the file's length after the append.
    async fn append(&mut self, sync: bool) -> Result<u64, SinkError> {
        let mut buf = std::mem::take(&mut self.buf);
        let slot = self.file.clone();
        let (result, returned) = tokio::task::spawn_blocking(move || {
            let mut guard = lock(&slot);
            let result = match guard.as_mut() {
                None => Err("the file is not open".to_string()),
                Some(file) => file
                    .write_all(&buf)
                    .and_then(|()| if sync { file.sync_data() } else { Ok(()) })
                    .and_then(|()| file.metadata().map(|m| m.len()))
                    .map_err(|e| e.to_string()),
            };
            if result.is_err() {
                // A failed append may have left a partial line; recovery in
                // `open` must run before the next write.
                *guard = None;
            }
            buf.clear();
            (result, buf)
        })
        .await
        .map_err(blocking_failed)?;
        self.buf = returned;
        result.map_err(|e| {
            SinkError::transient(format!("file sink {:?}: writing {} failed: {e}", self.id, self.path.display()))
        })
    }
}

fn blocking_failed(e: tokio::task::JoinError) -> SinkError {
    SinkError::transient_from("file sink: blocking I/O task failed", e)
}

#[async_trait]
impl Sink for FileSink {
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        vec![crate::preflight::writable_dir("path", &self.path)]
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn guarantee(&self) -> Guarantee {
        super::FileSinkConfig::GUARANTEE
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        let path = self.path.clone();
        let slot = self.file.clone();
        let marked = self.marked();
        let tail = tokio::task::spawn_blocking(move || -> Result<Tail, String> {
            let mut guard = lock(&slot);
            *guard = None;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let mut file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(&path)
                .map_err(|e| format!("cannot open: {e}"))?;
            let tail = if marked { recover_marked(&path, &mut file)? } else { recover(&mut file)? };
            *guard = Some(file);
            Ok(tail)
        })
        .await
        .map_err(blocking_failed)?
        .map_err(|problem| self.permanent(problem))?;
        self.held = match tail {
            Tail::Empty => None,
            Tail::Holds(position) => Some(position),
        };
        Ok(self.held.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        let shared = events.shared();
        self.buf.clear();
        while let Some(chunk) = events.next_chunk().await? {
            let encoding = self.encoder.chunk(shared.as_ref(), chunk).await;
            for (index, event) in chunk.iter().enumerate() {
                // Lines have no keys, so a tombstone has nothing to name.
                let records = encoding.records(&self.encoder, index, event)?;
                for record in records.iter().filter(|r| r.kind != RecordKind::Tombstone) {
                    self.buf.extend_from_slice(record.value.as_deref().unwrap_or(b"null"));
                    self.buf.push(b'\n');
                }
            }
            // A spilled batch arrives in many chunks; write as we go so the
            // encoded batch never has to fit in memory.
            if self.buf.len() >= APPEND_BYTES {
                self.append(false).await?;
            }
        }
        let length = self.append(true).await?;
        if self.marked() {
            let path = self.path.clone();
            let position = last.clone();
            tokio::task::spawn_blocking(move || write_mark(&path, length, Some(&position)))
                .await
                .map_err(blocking_failed)?
                .map_err(|problem| {
                    // The batch is in the file but not marked: the next
                    // open cuts it, and the coordinator sends it again.
                    lock(&self.file).take();
                    SinkError::transient(format!("file sink {:?}: {problem}", self.id))
                })?;
        }
        self.held = Some(last);
        Ok(self.held.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        // Every write is fsynced before it returns.
        Ok(self.held.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        let slot = self.file.clone();
        tokio::task::spawn_blocking(move || lock(&slot).take())
            .await
            .map_err(blocking_failed)?;
        Ok(())
    }
}
