use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice_core::event::Marks;
use sluice_core::{Event, EventChunks, Guarantee, Position, SharedWork, Sink, SinkError};

use sluice_format::{FormatConfig, RecordKind};

use crate::encoded::SharedEncoder;

use super::appender::{Appender, Job};
use super::mark::recover_marked;
use super::recover::{Tail, recover};

pub struct FileSink {
    id: String,
    path: PathBuf,
    encoder: SharedEncoder,
    /// The thread that owns the open file; `None` until `open`.
    appender: Option<Appender>,
    /// What `open` found in the file.
    held: Option<Position>,
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
            appender: None,
            held: None,
        }
    }

    /// Native lines carry their position; other envelopes keep a mark.
    fn marked(&self) -> bool {
        !self.encoder.is_native()
    }

    /// Appends a line for each of `chunk`'s records, which the sinks of
    /// the same format share.
    async fn write_records(
        &mut self,
        shared: Option<&(Arc<SharedWork>, u64)>,
        chunk: &[Event],
        buf: &mut Vec<u8>,
    ) -> Result<(), SinkError> {
        let encoding = self.encoder.chunk(shared, chunk).await;
        for (index, event) in chunk.iter().enumerate() {
            // Lines have no keys, so a tombstone has nothing to name.
            let records = encoding.records(&self.encoder, index, event)?;
            for record in records.iter().filter(|r| r.kind != RecordKind::Tombstone) {
                buf.extend_from_slice(record.value.as_deref().unwrap_or(b"null"));
                buf.push(b'\n');
            }
        }
        Ok(())
    }

    /// Appends the native line of each of `chunk`'s events.
    fn write_direct(&self, chunk: &[Event], marks: &mut Marks, buf: &mut Vec<u8>) -> Result<(), SinkError> {
        for event in chunk {
            match sluice_format::write_native_value(event, marks, buf) {
                Ok(true) => buf.push(b'\n'),
                Ok(false) => {}
                Err(e) => return Err(self.encoder.rejected(event, e)),
            }
        }
        Ok(())
    }

    fn permanent(&self, problem: String) -> SinkError {
        SinkError::permanent(
            format!("file sink {:?}: {}: {problem}", self.id, self.path.display()),
            "check the path and its permissions, or point the sink at a new file",
        )
    }
}

/// Encoded bytes gathered before an append, when a batch comes in chunks.
const APPEND_BYTES: usize = 1024 * 1024;

/// How long after the last batch was sent its fsync is waited for when no
/// next batch comes: about an fsync, so an idle stream's last batch is
/// checkpointed at once, and a busy stream's writes still overlap.
const SYNC_WAIT: Duration = Duration::from_millis(2);

impl FileSink {
    fn appender(&mut self) -> Result<&mut Appender, SinkError> {
        let id = &self.id;
        self.appender.as_mut().ok_or_else(|| SinkError::transient(format!("file sink {id:?}: the file is not open")))
    }

    fn write_failed(&self, problem: String) -> SinkError {
        SinkError::transient(format!("file sink {:?}: writing {} failed: {problem}", self.id, self.path.display()))
    }

    /// What is fsynced: the last batch the thread synced, or what `open`
    /// found in the file.
    fn durable(&mut self) -> Option<Position> {
        self.appender.as_mut().and_then(Appender::durable).or_else(|| self.held.clone())
    }

    /// Stops the writing thread, if one runs, and waits until it has let
    /// go of the file.
    async fn stop_appender(&mut self) {
        if let Some(appender) = self.appender.as_mut() {
            appender.stop().await;
        }
        self.appender = None;
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

    fn reads_back_what_it_holds(&self) -> bool {
        true
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        // Whatever the thread still had queued lands before the file is
        // recovered, never after.
        self.stop_appender().await;
        let path = self.path.clone();
        let marked = self.marked();
        let (tail, file) = tokio::task::spawn_blocking(move || -> Result<(Tail, std::fs::File), String> {
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
            Ok((tail, file))
        })
        .await
        .map_err(blocking_failed)?
        .map_err(|problem| self.permanent(problem))?;
        let mark = marked.then(|| self.path.clone());
        self.appender = Some(Appender::start(file, mark).map_err(|problem| self.write_failed(problem))?);
        self.held = match tail {
            Tail::Empty => None,
            Tail::Holds(position) => Some(position),
        };
        Ok(self.held.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        let shared = events.shared();
        let mut buf = self.appender()?.buffer();
        // A native line is its record's value: with no other sink to share
        // records with, it is written straight into the buffer, with no
        // record built per event.
        let direct = self.encoder.is_native() && shared.as_ref().is_none_or(|(work, _)| work.alone());
        let mut marks = Marks::default();
        while let Some(chunk) = events.next_chunk().await? {
            if direct {
                self.write_direct(chunk, &mut marks, &mut buf)?;
            } else {
                self.write_records(shared.as_ref(), chunk, &mut buf).await?;
            }
            // A spilled batch arrives in many chunks; write as we go so the
            // encoded batch never has to fit in memory.
            if buf.len() >= APPEND_BYTES {
                let appender = self.appender()?;
                let sent = appender.send(Job { buf, ends: None }).await;
                buf = appender.buffer();
                sent.map_err(|problem| self.write_failed(problem))?;
            }
        }
        // The thread appends and fsyncs the batch while the next one is
        // encoded: what this write reports durable is what it has synced.
        let sent = self.appender()?.send(Job { buf, ends: Some(last) }).await;
        sent.map_err(|problem| self.write_failed(problem))?;
        Ok(self.durable())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        if let Some(appender) = self.appender.as_mut() {
            let synced = appender.sync().await;
            synced.map_err(|problem| self.write_failed(problem))?;
        }
        Ok(self.durable())
    }

    fn unsynced_bound(&self) -> Option<usize> {
        Some(super::appender::UNSYNCED)
    }

    fn flush_due(&self) -> Option<Instant> {
        self.appender.as_ref()?.unreported_since().map(|sent| sent + SYNC_WAIT)
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.stop_appender().await;
        Ok(())
    }
}
