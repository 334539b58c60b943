//! A fault-injecting sink wrapper for coordinator tests.

use sluice_core::sync::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_core::{EventChunks, Guarantee, Position, Sink, SinkError, SliceChunks, collect_chunks};
use tokio::sync::Notify;

/// What one `write` call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Pass the write through.
    None,
    /// Fail before writing anything.
    FailBefore,
    /// Fail before writing, with an error retrying cannot fix.
    Reject,
    /// Refuse the batch's first event for good (a poison event).
    RejectFirst,
    /// Write, then report a failure: the retry must not duplicate.
    FailAfter,
    /// Write half the batch, then fail: a torn write.
    FailMidway,
    /// Never return, so the coordinator's deadline fires.
    Hang,
    /// Write, then pull the plug on the whole process (see [`CrashSwitch`]).
    CrashAfter,
    /// Pull the plug before writing.
    CrashBefore,
}

/// Faults consumed one per `write`; once empty, writes pass through.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan(Arc<Mutex<VecDeque<Fault>>>);

impl FaultPlan {
    pub fn new(faults: impl IntoIterator<Item = Fault>) -> Self {
        Self(Arc::new(Mutex::new(faults.into_iter().collect())))
    }

    fn next(&self) -> Fault {
        lock(&self.0).pop_front().unwrap_or(Fault::None)
    }
}

/// Fired by a crash fault. The test harness waits on it and then drops the
/// whole runtime mid-flight, which is what a kill -9 does to in-memory state.
#[derive(Debug, Clone, Default)]
pub struct CrashSwitch(Arc<Notify>);

impl CrashSwitch {
    pub async fn fired(&self) {
        self.0.notified().await;
    }

    fn fire(&self) {
        self.0.notify_one();
    }
}

pub struct FaultySink<S> {
    inner: S,
    plan: FaultPlan,
    crash: CrashSwitch,
}

impl<S: Sink> FaultySink<S> {
    pub fn new(inner: S, plan: FaultPlan, crash: CrashSwitch) -> Self {
        Self { inner, plan, crash }
    }
}

async fn crash(switch: CrashSwitch) -> Result<Option<Position>, SinkError> {
    switch.fire();
    std::future::pending().await
}

fn injected() -> SinkError {
    SinkError::transient("injected fault")
}

#[async_trait]
impl<S: Sink> Sink for FaultySink<S> {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        self.inner.preflight().await
    }

    fn guarantee(&self) -> Guarantee {
        self.inner.guarantee()
    }

    fn merges_writes(&self) -> bool {
        self.inner.merges_writes()
    }

    fn unsynced_bound(&self) -> Option<usize> {
        self.inner.unsynced_bound()
    }

    fn reads_back_what_it_holds(&self) -> bool {
        self.inner.reads_back_what_it_holds()
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        self.inner.open().await
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let fault = self.plan.next();
        if fault == Fault::None {
            return self.inner.write(events).await;
        }
        let all = collect_chunks(events).await?;
        let last = events.last_position().clone();
        let write = |events| SliceChunks::ending_at(events, &last);
        match fault {
            Fault::None => unreachable!("passed through above"),
            Fault::FailBefore => Err(injected()),
            Fault::Reject => Err(SinkError::permanent("injected permanent fault", "remove the fault")),
            Fault::RejectFirst => match all.first() {
                Some(first) => Err(SinkError::Rejected {
                    detail: "injected poison event".into(),
                    position: first.position.clone(),
                }),
                // A write whose events were all dropped has none to reject.
                None => Err(injected()),
            },
            Fault::FailAfter => {
                self.inner.write(&mut write(&all)).await?;
                Err(injected())
            }
            Fault::FailMidway => {
                if let Some(mut half) = SliceChunks::new(&all[..all.len() / 2]) {
                    self.inner.write(&mut half).await?;
                }
                Err(injected())
            }
            Fault::Hang => std::future::pending().await,
            Fault::CrashAfter => {
                self.inner.write(&mut write(&all)).await?;
                crash(self.crash.clone()).await
            }
            Fault::CrashBefore => crash(self.crash.clone()).await,
        }
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        self.inner.flush().await
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.inner.close().await
    }

    async fn redeliver(&mut self, event: &sluice_core::Event) -> Result<(), SinkError> {
        self.inner.redeliver(event).await
    }
}
