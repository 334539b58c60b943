//! What an operator or the SLO monitor can ask of a running pipeline:
//! pause and resume its source, send a dead letter to its sink again, and
//! detach an optional sink.
//!
//! The figures live in [`PipelineStatus`], which only the pipeline's own
//! tasks write; requests go through [`PipelineControl`], whose receiving
//! ends the intake (pause) and each sink's writer (redeliver, detach)
//! hold. A request reaches a writer only while it runs: before the
//! pipeline starts, after it stops, and once the sink is detached, the
//! writer's channel is closed and the request is refused as not running.

use std::sync::{Arc, Mutex};

use sluice_core::{DeadLetter, Event};
use tokio::sync::{mpsc, oneshot, watch};

use crate::status::{PipelineStatus, SinkInfo, lock};

/// Requests a writer serves between batches, queued per sink.
const CONTROL_QUEUE: usize = 4;

/// A request to a sink's writer, served between batches.
pub(crate) enum Control {
    /// Send one dead letter's event to the sink again.
    Redeliver { letter: Box<DeadLetter>, event: Box<Event>, reply: oneshot::Sender<Result<(), String>> },
    /// Stop writing to this optional sink and stop holding the source back for it.
    Detach { reason: String },
    /// Probe a detached sink now instead of at its next probe.
    Reattach { reply: oneshot::Sender<Result<String, ReattachError>> },
}

/// Why a sink could not be reattached.
#[derive(Debug)]
pub enum ReattachError {
    NoSuchSink,
    /// The sink's writer is not running: the pipeline stopped, or the sink
    /// was detached for pinning the source's log and needs a resync.
    NotRunning,
    /// The sink is not detached: it is writing already.
    NotDetached,
    /// The probe failed; the sink stays detached.
    ProbeFailed(String),
}

/// Why a dead letter could not be sent again.
#[derive(Debug)]
pub enum RedeliverError {
    NoSuchSink,
    /// The sink's writer is not running (the pipeline stopped, or the sink detached).
    NotRunning,
    Refused(String),
}

/// The commands of one pipeline. Cloning it gives another handle on the
/// same pipeline.
#[derive(Clone)]
pub struct PipelineControl {
    inner: Arc<Inner>,
}

struct Inner {
    pause: watch::Sender<bool>,
    /// Sink ids, in the order of the pipeline's sinks.
    sink_ids: Vec<String>,
    /// The sending end of each running writer's requests.
    writers: Vec<Mutex<Option<mpsc::Sender<Control>>>>,
}

/// A pipeline as the API and the process see it: what it reports and what
/// it can be asked to do.
#[derive(Clone)]
pub struct PipelineHandle {
    pub status: Arc<PipelineStatus>,
    pub control: PipelineControl,
}

impl PipelineHandle {
    pub fn new(name: &str, source_id: &str, source_kind: &str, sinks: Vec<SinkInfo>) -> Self {
        let (pause, paused) = watch::channel(false);
        let sink_ids: Vec<String> = sinks.iter().map(|s| s.id.clone()).collect();
        let writers = sink_ids.iter().map(|_| Mutex::new(None)).collect();
        let status = PipelineStatus::new(name, source_id, source_kind, sinks, paused);
        Self { status, control: PipelineControl { inner: Arc::new(Inner { pause, sink_ids, writers }) } }
    }
}

impl PipelineControl {
    /// Stops reading the source (sinks finish what they hold); `false`
    /// when it was paused already.
    pub fn pause(&self) -> bool {
        !self.inner.pause.send_replace(true)
    }

    /// Reads the source again; `false` when it was not paused.
    pub fn resume(&self) -> bool {
        self.inner.pause.send_replace(false)
    }

    /// Sends a dead letter back to its sink through the sink's own writer.
    pub async fn redeliver(&self, letter: DeadLetter) -> Result<(), RedeliverError> {
        let index =
            self.inner.sink_ids.iter().position(|id| *id == letter.sink_id).ok_or(RedeliverError::NoSuchSink)?;
        let writer = self.writer(index).ok_or(RedeliverError::NotRunning)?;
        let event = letter
            .decode_event()
            .map_err(|e| RedeliverError::Refused(format!("its stored event cannot be read back ({e}); purge it")))?;
        let (reply, answer) = oneshot::channel();
        let request = Control::Redeliver { letter: Box::new(letter), event: Box::new(event), reply };
        writer.send(request).await.map_err(|_| RedeliverError::NotRunning)?;
        answer.await.map_err(|_| RedeliverError::NotRunning)?.map_err(RedeliverError::Refused)
    }

    /// Asks a detached sink's writer to probe its sink now; the answer
    /// says whether it reattached.
    pub async fn reattach(&self, sink_id: &str) -> Result<String, ReattachError> {
        let index = self.inner.sink_ids.iter().position(|id| id == sink_id).ok_or(ReattachError::NoSuchSink)?;
        let writer = self.writer(index).ok_or(ReattachError::NotRunning)?;
        let (reply, answer) = oneshot::channel();
        writer.send(Control::Reattach { reply }).await.map_err(|_| ReattachError::NotRunning)?;
        answer.await.map_err(|_| ReattachError::NotRunning)?
    }

    /// Asks the writer of optional sink `index` to detach; `false` when it
    /// is not running or has requests queued already.
    pub(crate) fn request_detach(&self, index: usize, reason: String) -> bool {
        match self.writer(index) {
            Some(writer) => writer.try_send(Control::Detach { reason }).is_ok(),
            None => false,
        }
    }

    /// The pause switch, for the intake.
    pub(crate) fn paused(&self) -> watch::Receiver<bool> {
        self.inner.pause.subscribe()
    }

    /// Opens the request channel of the writer of sink `index`; the writer
    /// closes it by closing or dropping the receiver.
    pub(crate) fn connect(&self, index: usize) -> mpsc::Receiver<Control> {
        let (tx, rx) = mpsc::channel(CONTROL_QUEUE);
        if let Some(slot) = self.inner.writers.get(index) {
            *lock(slot) = Some(tx);
        }
        rx
    }

    /// Forgets every writer's channel once the pipeline has stopped.
    pub(crate) fn disconnect_all(&self) {
        for slot in &self.inner.writers {
            *lock(slot) = None;
        }
    }

    fn writer(&self, index: usize) -> Option<mpsc::Sender<Control>> {
        lock(self.inner.writers.get(index)?).clone().filter(|tx| !tx.is_closed())
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::Guarantee;

    use super::*;
    use crate::status::PipelineState;

    fn handle() -> PipelineHandle {
        let sink =
            SinkInfo { id: "out".into(), guarantee: Guarantee::AtLeastOnce { dedup: "position" }, required: true };
        PipelineHandle::new("p", "src", "generator", vec![sink])
    }

    fn letter(sink_id: &str) -> DeadLetter {
        DeadLetter {
            key: format!("src::sink::{sink_id}::gen:1:0"),
            source_id: "src".into(),
            sink_id: sink_id.into(),
            position: "gen:1:0".into(),
            error: "refused".into(),
            event: String::new(),
            encoded: String::new(),
            recorded_at_us: 1,
        }
    }

    #[test]
    fn pausing_shows_in_the_status_and_reaches_the_intake() {
        let handle = handle();
        let intake = handle.control.paused();
        handle.status.set_state(PipelineState::Running);
        assert!(handle.control.pause());
        assert!(!handle.control.pause(), "a second pause changes nothing");
        assert_eq!(handle.status.state(), PipelineState::Paused);
        assert!(*intake.borrow());
        assert!(handle.control.resume());
        assert_eq!(handle.status.state(), PipelineState::Running);
        assert!(!*intake.borrow());
    }

    #[tokio::test]
    async fn requests_reach_a_writer_only_while_it_listens() {
        let handle = handle();
        let control = &handle.control;
        assert!(matches!(control.redeliver(letter("other")).await, Err(RedeliverError::NoSuchSink)));
        assert!(matches!(control.redeliver(letter("out")).await, Err(RedeliverError::NotRunning)));
        assert!(!control.request_detach(0, "before the writer runs".into()));

        let mut writer = control.connect(0);
        assert!(control.request_detach(0, "pins the log".into()));
        assert!(matches!(writer.recv().await, Some(Control::Detach { reason }) if reason == "pins the log"));
        // A writer that detached closes its end: nothing more is queued for it.
        writer.close();
        assert!(!control.request_detach(0, "again".into()));
        assert!(matches!(control.redeliver(letter("out")).await, Err(RedeliverError::NotRunning)));
        control.disconnect_all();
        assert!(!control.request_detach(0, "after the run".into()));
    }
}
