//! The file sink's writing thread. It appends batches in the order they
//! are sent, while the sink encodes the next ones, and fsyncs once for all
//! the batches that queued up while it was busy (a group commit).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_core::sync::lock;
use sluice_core::{Position, failpoint};
use tokio::sync::{mpsc, watch};

use super::mark::write_mark;

/// Batches queued for the thread beside the one it writes: enough for
/// encoding to run ahead while it syncs, few enough to bound the memory.
const QUEUED: usize = 2;

/// Whole batches sent and not yet reported fsynced, at most: the queued
/// ones, the one being appended, and one appended whose sync the sink has
/// not yet been told of.
pub(super) const UNSYNCED: usize = QUEUED + 2;

/// Emptied buffers kept for reuse.
const SPARE_BUFFERS: usize = QUEUED + 2;

/// Bytes to append; `ends` is the batch's last position, or `None` for a
/// part of a batch that more parts follow (a spilled batch).
pub(super) struct Job {
    pub(super) buf: Vec<u8>,
    pub(super) ends: Option<Position>,
}

#[derive(Default)]
struct Progress {
    /// Batches appended and fsynced.
    synced: u64,
    /// The last of them.
    durable: Option<Position>,
    failed: Option<String>,
    stopped: bool,
}

pub(super) struct Appender {
    jobs: Option<mpsc::Sender<Job>>,
    progress: watch::Receiver<Progress>,
    spares: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Whole batches sent.
    sent: u64,
    /// Whole batches known fsynced when [`Appender::durable`] was last
    /// asked: the ones the sink has reported durable.
    told: u64,
    last_sent: Instant,
}

impl Appender {
    /// Starts the thread on `file`; `marked` is the file's path when a
    /// position mark goes beside it (a foreign envelope).
    pub(super) fn start(file: File, marked: Option<PathBuf>) -> Result<Self, String> {
        let length = file.metadata().map_err(|e| format!("cannot stat: {e}"))?.len();
        let (jobs, queue) = mpsc::channel(QUEUED);
        let (report, progress) = watch::channel(Progress::default());
        let spares = Arc::new(Mutex::new(Vec::new()));
        let thread = Thread { file, length, marked, queue, report, spares: spares.clone() };
        std::thread::Builder::new()
            .name("sluice-file-sink".into())
            .spawn(move || thread.run())
            .map_err(|e| format!("cannot start its writing thread: {e}"))?;
        Ok(Self { jobs: Some(jobs), progress, spares, sent: 0, told: 0, last_sent: Instant::now() })
    }

    /// An empty buffer to encode into.
    pub(super) fn buffer(&self) -> Vec<u8> {
        lock(&self.spares).pop().unwrap_or_default()
    }

    /// Queues `job`, waiting while the queue is full.
    pub(super) async fn send(&mut self, job: Job) -> Result<(), String> {
        self.failure()?;
        let whole = job.ends.is_some();
        let jobs = self.jobs.as_ref().ok_or("the file is not open")?;
        if jobs.send(job).await.is_err() {
            // The thread stopped: it says why.
            self.failure()?;
            return Err("its writing thread stopped".into());
        }
        if whole {
            self.sent += 1;
            self.last_sent = Instant::now();
        }
        Ok(())
    }

    /// The last batch fsynced, which the sink now reports durable.
    pub(super) fn durable(&mut self) -> Option<Position> {
        let progress = self.progress.borrow();
        self.told = progress.synced;
        progress.durable.clone()
    }

    /// Since when a batch sent has not been reported durable: when to ask
    /// again. A batch the thread fsyncs just after the write that sent it
    /// returned counts too, or on a stream that goes quiet its position
    /// would wait for the next write to be reported.
    pub(super) fn unreported_since(&self) -> Option<Instant> {
        (self.told < self.sent).then_some(self.last_sent)
    }

    /// Waits until every batch sent is fsynced.
    pub(super) async fn sync(&mut self) -> Result<(), String> {
        let sent = self.sent;
        let _ = self.progress.wait_for(|p| p.synced >= sent || p.failed.is_some() || p.stopped).await;
        self.failure()?;
        if self.progress.borrow().synced < sent {
            return Err("its writing thread stopped".into());
        }
        Ok(())
    }

    /// Stops the thread and waits until it has let go of the file, so
    /// nothing it still had queued lands after a recovery. Can be waited
    /// for again if the wait is cut off.
    pub(super) async fn stop(&mut self) {
        self.jobs = None;
        let _ = self.progress.wait_for(|p| p.stopped).await;
    }

    fn failure(&self) -> Result<(), String> {
        match &self.progress.borrow().failed {
            Some(problem) => Err(problem.clone()),
            None => Ok(()),
        }
    }
}

struct Thread {
    file: File,
    length: u64,
    marked: Option<PathBuf>,
    queue: mpsc::Receiver<Job>,
    report: watch::Sender<Progress>,
    spares: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Thread {
    fn run(mut self) {
        if let Err(problem) = self.append_until_closed() {
            // What was appended but not synced may be a partial line or a
            // batch without its mark; the sink's `open` recovers the file.
            self.report.send_modify(|p| p.failed = Some(problem));
        }
        drop(self.file);
        self.report.send_modify(|p| p.stopped = true);
    }

    fn append_until_closed(&mut self) -> Result<(), String> {
        while let Some(first) = self.queue.blocking_recv() {
            // Everything queued meanwhile goes under the same fsync.
            let mut finished: Option<(Position, u64)> = None;
            let mut batches = 0;
            let mut next = Some(first);
            while let Some(job) = next {
                self.file.write_all(&job.buf).map_err(|e| e.to_string())?;
                self.length += job.buf.len() as u64;
                if let Some(ends) = job.ends {
                    finished = Some((ends, self.length));
                    batches += 1;
                }
                self.recycle(job.buf);
                next = self.queue.try_recv().ok();
            }
            let Some((ends, length)) = finished else { continue };
            failpoint::hit("file.before_sync");
            self.file.sync_data().map_err(|e| e.to_string())?;
            if let Some(path) = &self.marked {
                failpoint::hit("file.before_mark");
                write_mark(path, length, Some(&ends))?;
            }
            self.report.send_modify(|p| {
                p.synced += batches;
                p.durable = Some(ends);
            });
        }
        Ok(())
    }

    fn recycle(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut spares = lock(&self.spares);
        if spares.len() < SPARE_BUFFERS {
            spares.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_synced_after_its_write_returned_is_still_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new().create(true).append(true).open(dir.path().join("out")).unwrap();
        let mut appender = Appender::start(file, None).unwrap();
        let end = Position::Generator { tx: 1, seq: 0 };
        appender.send(Job { buf: b"line\n".to_vec(), ends: Some(end.clone()) }).await.unwrap();
        // The write that sent it has returned; the thread syncs it after.
        let _ = appender.progress.wait_for(|p| p.synced == 1).await;
        assert!(appender.unreported_since().is_some(), "synced but never reported: nothing would ask for it");
        assert_eq!(appender.durable(), Some(end));
        assert_eq!(appender.unreported_since(), None);
        appender.stop().await;
    }
}
