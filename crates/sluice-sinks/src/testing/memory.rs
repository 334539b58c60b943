//! A memory sink for tests and benchmarks.

use sluice_core::sync::lock;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use sluice_core::{Event, EventChunks, Guarantee, Position, Sink, SinkError};

/// What survives a simulated crash: the events the sink made durable.
#[derive(Debug, Default)]
pub struct MemoryLog {
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    events: Vec<Event>,
    event_count: u64,
    last: Option<Position>,
}

impl MemoryLog {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The durable events, in arrival order (empty when not retaining).
    pub fn events(&self) -> Vec<Event> {
        self.lock().events.clone()
    }

    /// How many events were accepted, retained or not.
    pub fn event_count(&self) -> u64 {
        self.lock().event_count
    }

    pub fn last_position(&self) -> Option<Position> {
        self.lock().last.clone()
    }

    fn lock(&self) -> MutexGuard<'_, LogState> {
        lock(&self.state)
    }
}

/// How a [`MemorySink`] behaves.
#[derive(Debug, Clone, Copy)]
pub struct MemoryOptions {
    /// Report the last durable position on `open`, like a sink that stores
    /// its checkpoint with its data; such a sink must never see duplicates.
    pub co_located: bool,
    /// Keep the events (tests) or only count them (benchmarks).
    pub retain: bool,
    /// Make events durable only every N writes (and on flush), like a sink
    /// that buffers; events accepted but not yet durable die with a crash.
    pub durable_every: u32,
    /// Take batches queued behind a write in one write, like a sink whose
    /// commit costs the same whatever it holds.
    pub merges_writes: bool,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        Self { co_located: false, retain: true, durable_every: 1, merges_writes: false }
    }
}

pub struct MemorySink {
    id: String,
    log: Arc<MemoryLog>,
    options: MemoryOptions,
    pending: Vec<Event>,
    pending_last: Option<Position>,
    durable_here: Option<Position>,
    writes_since_durable: u32,
}

impl MemorySink {
    pub fn new(id: impl Into<String>, log: Arc<MemoryLog>, options: MemoryOptions) -> Self {
        Self {
            id: id.into(),
            log,
            options,
            pending: Vec::new(),
            pending_last: None,
            durable_here: None,
            writes_since_durable: 0,
        }
    }

    fn make_durable(&mut self) -> Option<Position> {
        let mut state = self.log.lock();
        if let Some(last) = self.pending_last.take() {
            // A sink that does not co-locate may be handed a replay below
            // what it already holds; what it holds never shrinks.
            state.last = state.last.clone().max(Some(last.clone()));
            self.durable_here = self.durable_here.clone().max(Some(last));
        }
        state.events.append(&mut self.pending);
        self.watermark_with(&state)
    }

    /// What this sink may claim durable: a sink that co-locates knows what
    /// the log holds; one that does not knows only what it wrote itself.
    fn watermark_with(&self, state: &LogState) -> Option<Position> {
        if self.options.co_located { state.last.clone() } else { self.durable_here.clone() }
    }
}

#[async_trait]
impl Sink for MemorySink {
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        vec![sluice_core::preflight::Check::ok("target", "memory of this process")]
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn merges_writes(&self) -> bool {
        self.options.merges_writes
    }

    fn reads_back_what_it_holds(&self) -> bool {
        self.options.co_located
    }

    fn guarantee(&self) -> Guarantee {
        if self.options.co_located {
            Guarantee::ExactlyOnce { condition: None }
        } else {
            Guarantee::AtLeastOnce { dedup: "event id" }
        }
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        // What was accepted but not durable is gone, as after a crash.
        self.pending.clear();
        self.pending_last = None;
        self.writes_since_durable = 0;
        Ok(if self.options.co_located { self.log.last_position() } else { None })
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        self.pending_last = Some(events.last_position().clone());
        while let Some(chunk) = events.next_chunk().await? {
            self.log.lock().event_count += chunk.len() as u64;
            if self.options.retain {
                self.pending.extend_from_slice(chunk);
            }
        }
        self.writes_since_durable += 1;
        if self.writes_since_durable >= self.options.durable_every {
            self.writes_since_durable = 0;
            return Ok(self.make_durable());
        }
        let state = self.log.lock();
        Ok(self.watermark_with(&state))
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        self.writes_since_durable = 0;
        Ok(self.make_durable())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}
