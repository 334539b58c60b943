//! Transforms of change events, run on batches before they reach a sink.
//!
//! A transform is a pure function of one event: it changes the event's
//! rows (and the schema that describes them) or drops the event, and never
//! touches its position, source or id. A replay therefore produces the
//! same output, which is what keeps an exactly-once sink exactly-once.

mod columns;
mod config;
mod filter;
mod mask;
mod outbox;
mod route;
mod rows;
mod unwrap;
#[cfg(feature = "vrl")]
mod vrl_script;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use sluice_core::Event;

pub use config::{
    ColumnsConfig, Condition, DeleteHandling, FilterAction, FilterConfig, MaskConfig, MaskWith, OutboxConfig,
    OutboxHeader, OutboxUpdates, RouteConfig, Scalar, TransformConfig, UnwrapConfig, VrlConfig,
};

/// What a transform does with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    Drop,
}

/// A transform that cannot handle one event; the event goes to the dead
/// letter queue with this reason, and the rest of the batch goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformError(pub String);

impl std::fmt::Display for TransformError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One step of a transform list.
pub trait Transform: Send + Sync {
    /// Changes `event` in place, or says to drop it.
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError>;
}

/// How many events a step saw, passed on, dropped and failed on.
#[derive(Debug, Default)]
pub struct Counts {
    pub events_in: AtomicU64,
    pub events_out: AtomicU64,
    pub dropped: AtomicU64,
    pub errored: AtomicU64,
}

/// One step's counts over a run of events, added to its [`Counts`] once.
#[derive(Clone, Copy, Default)]
struct Tally {
    events_in: u64,
    events_out: u64,
    dropped: u64,
    errored: u64,
}

struct Step {
    /// `filter`, `mask`, …: for metrics and messages.
    kind: &'static str,
    transform: Box<dyn Transform>,
    counts: Counts,
}

/// A config's transform list, built once and applied in order.
#[derive(Default)]
pub struct Transforms {
    steps: Vec<Step>,
}

/// A step that failed on an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepError {
    /// From 1, as the config lists the steps.
    pub step: usize,
    pub kind: &'static str,
    pub error: TransformError,
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "transform {} ({}): {}", self.step, self.kind, self.error)
    }
}

impl std::fmt::Debug for Transforms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.steps.iter().map(|s| s.kind)).finish()
    }
}

impl Transforms {
    /// Builds every step; an error names the step (from 1) and what is wrong.
    pub fn build(configs: &[TransformConfig]) -> Result<Self, String> {
        let mut steps = Vec::with_capacity(configs.len());
        for (index, config) in configs.iter().enumerate() {
            let transform = config.build().map_err(|e| format!("transform {} ({}): {e}", index + 1, config.kind()))?;
            steps.push(Step { kind: config.kind(), transform, counts: Counts::default() });
        }
        Ok(Self { steps })
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Runs `event` through every step. A failing step leaves `event`
    /// part-way: the callers hold the event as the source gave it (the
    /// batch in the writer, the letter in the dead letter queue) and put
    /// that in the queue, so no copy is made here on every event.
    pub fn apply(&self, event: &mut Event) -> Result<Verdict, StepError> {
        let mut verdicts = self.apply_all(std::slice::from_mut(event));
        verdicts.pop().unwrap_or(Ok(Verdict::Keep))
    }

    /// [`apply`](Self::apply) on each of `events`, in order: the counts
    /// are added once for the lot, since threads that share the steps
    /// would otherwise contend for them on every event.
    pub fn apply_all(&self, events: &mut [Event]) -> Vec<Result<Verdict, StepError>> {
        let mut tally = vec![Tally::default(); self.steps.len()];
        let verdicts = events.iter_mut().map(|event| self.apply_counting(event, &mut tally)).collect();
        self.add(&tally);
        verdicts
    }

    fn apply_counting(&self, event: &mut Event, tally: &mut [Tally]) -> Result<Verdict, StepError> {
        for (index, (step, tally)) in self.steps.iter().zip(tally.iter_mut()).enumerate() {
            tally.events_in += 1;
            match step.transform.apply(event) {
                Ok(Verdict::Keep) => tally.events_out += 1,
                Ok(Verdict::Drop) => {
                    tally.dropped += 1;
                    return Ok(Verdict::Drop);
                }
                Err(error) => {
                    tally.errored += 1;
                    return Err(StepError { step: index + 1, kind: step.kind, error });
                }
            }
        }
        Ok(Verdict::Keep)
    }

    fn add(&self, tally: &[Tally]) {
        for (step, tally) in self.steps.iter().zip(tally) {
            let counts = &step.counts;
            for (count, n) in [
                (&counts.events_in, tally.events_in),
                (&counts.events_out, tally.events_out),
                (&counts.dropped, tally.dropped),
                (&counts.errored, tally.errored),
            ] {
                if n > 0 {
                    count.fetch_add(n, Relaxed);
                }
            }
        }
    }

    /// Each step's kind and counts, in order.
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, &Counts)> {
        self.steps.iter().map(|s| (s.kind, &s.counts))
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_flat;
#[cfg(all(test, feature = "vrl"))]
mod tests_vrl;
