use sluice_core::sync::lock;
use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice_core::{EventChunks, Guarantee, Position, Sink, SinkError};

use sluice_format::{FormatConfig, RecordKind};

use crate::encoded::SharedEncoder;

use super::append::{InFlight, Then};
use super::mark::recover_marked;
use super::recover::{Tail, recover};

pub struct FileSink {
    id: String,
    path: PathBuf,
    encoder: SharedEncoder,
    /// Behind a mutex that a blocking write holds until it finishes, so a
    /// recovery after a timed-out write waits for that write instead of
    /// racing it.
    file: Arc<Mutex<Option<File>>>,
    /// The durable position: the end of the last batch synced.
    held: Option<Position>,
    /// The last batch's append and sync, overlapping the next encoding.
    in_flight: Option<InFlight>,
    /// A buffer to encode into while another is being appended.
    spare: Vec<u8>,
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
            in_flight: None,
            spare: Vec::new(),
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

/// How long after its append began a batch's sync is waited for when no
/// next batch comes to wait for it: about an fsync, so an idle stream's
/// last batch is checkpointed at once, and a busy one still overlaps.
const SYNC_WAIT: Duration = Duration::from_millis(2);

impl FileSink {
    /// Waits for the append in flight; on success what it ends is durable.
    async fn settle(&mut self) -> Result<(), SinkError> {
        let Some(in_flight) = self.in_flight.as_mut() else { return Ok(()) };
        let (result, buf) = in_flight.wait().await.map_err(blocking_failed)?;
        let ends = self.in_flight.take().and_then(|done| done.ends);
        self.spare = buf;
        result.map_err(|e| {
            SinkError::transient(format!("file sink {:?}: writing {} failed: {e}", self.id, self.path.display()))
        })?;
        if ends.is_some() {
            self.held = ends;
        }
        Ok(())
    }

    /// Starts appending `buf` once the append before it is done.
    async fn start(&mut self, buf: Vec<u8>, then: Then, ends: Option<Position>) -> Result<(), SinkError> {
        self.settle().await?;
        self.in_flight = Some(InFlight::start(self.file.clone(), buf, then, ends));
        Ok(())
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
        // An append cut off by a failed or timed-out call finishes before
        // the file is recovered, so it cannot land after the recovery.
        if let Some(mut in_flight) = self.in_flight.take() {
            let _ = in_flight.wait().await;
        }
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
            // A process killed between an append and its sync leaves lines
            // only in the page cache; they are reported held now, and the
            // checkpoint will follow, so they must reach the disk first.
            file.sync_data().map_err(|e| format!("cannot fsync: {e}"))?;
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
        let mut buf = std::mem::take(&mut self.spare);
        buf.clear();
        while let Some(chunk) = events.next_chunk().await? {
            let encoding = self.encoder.chunk(shared.as_ref(), chunk).await;
            for (index, event) in chunk.iter().enumerate() {
                // Lines have no keys, so a tombstone has nothing to name.
                let records = encoding.records(&self.encoder, index, event)?;
                for record in records.iter().filter(|r| r.kind != RecordKind::Tombstone) {
                    buf.extend_from_slice(record.value.as_deref().unwrap_or(b"null"));
                    buf.push(b'\n');
                }
            }
            // A spilled batch arrives in many chunks; write as we go so the
            // encoded batch never has to fit in memory.
            if buf.len() >= APPEND_BYTES {
                self.start(buf, Then::Continue, None).await?;
                self.settle().await?;
                buf = std::mem::take(&mut self.spare);
            }
        }
        let mark = self.marked().then(|| self.path.clone());
        // The batch is appended and synced while the next one encodes: the
        // previous batch is what is durable now, this one from its sync on
        // (the next `write`, or `flush`).
        self.start(buf, Then::Finish { mark }, Some(last)).await?;
        Ok(self.held.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        self.settle().await?;
        Ok(self.held.clone())
    }

    fn flush_due(&self) -> Option<Instant> {
        self.in_flight.as_ref().map(|in_flight| in_flight.started + SYNC_WAIT)
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if let Some(mut in_flight) = self.in_flight.take() {
            let _ = in_flight.wait().await;
        }
        let slot = self.file.clone();
        tokio::task::spawn_blocking(move || lock(&slot).take())
            .await
            .map_err(blocking_failed)?;
        Ok(())
    }
}
