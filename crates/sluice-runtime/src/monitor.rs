//! The SLO monitor: once a second it checks a pipeline against its
//! service levels and health rules, and says why it is not ready.
//!
//! A limit must be passed for `slo.breach_after_secs` consecutive checks
//! before it counts as breached, and met for `slo.clear_after_secs` before
//! the breach ends, so a figure that hovers at the limit does not flap. A
//! breach is logged once when it starts and once when it ends, sets
//! `sluice_slo_breached`, and is listed as a problem, which makes `/ready`
//! answer 503. With `slo.detach_optional_sinks`, a retained-WAL breach
//! caused by an optional sink detaches that sink.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_config::SloConfig;
use tracing::{info, warn};

use crate::control::{PipelineControl, PipelineHandle};
use crate::latency::now_us;
use crate::status::{PipelineStatus, SinkState};

const CHECK_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Monitor {
    status: Arc<PipelineStatus>,
    /// Detaches an optional sink that pins the source's log.
    control: PipelineControl,
    slo: SloConfig,
    /// Breaches in force, by name.
    breached: BTreeSet<String>,
    /// For each limit whose state is changing, the consecutive checks it
    /// has been on the other side: over for one not breached yet, met for
    /// one breached.
    streaks: BTreeMap<String, u64>,
}

impl Monitor {
    pub fn new(handle: PipelineHandle, slo: SloConfig) -> Self {
        Self {
            status: handle.status,
            control: handle.control,
            slo,
            breached: BTreeSet::new(),
            streaks: BTreeMap::new(),
        }
    }

    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.check();
        }
    }

    fn check(&mut self) {
        let status = Arc::clone(&self.status);
        let status = &*status;
        let mut problems = Vec::new();
        let mut breaches = BTreeSet::new();
        let max_failing = self.slo.max_failing_secs as f64;

        let source_failing = status.source.failing_for_secs();
        if source_failing > max_failing {
            problems.push(format!("source {} has kept failing for {source_failing:.0}s", status.source_id));
        }
        let log = status.source.log();
        let behind = log.as_ref().and_then(|l| l.behind_bytes()).unwrap_or(0);
        let last_read = status.source.last_read_us.load(Ordering::Relaxed);
        if status.source.is_stalled() && !status.is_paused() {
            let quiet = if last_read == 0 {
                "nothing read yet".to_string()
            } else {
                format!("nothing read for {:.0}s", (now_us() - last_read) as f64 / 1e6)
            };
            let holder = status.held_back_by().map(|s| format!("; held back by sink {s}")).unwrap_or_default();
            problems.push(format!(
                "source {} is stalled: {quiet} while the server's log is {behind} bytes ahead{holder}",
                status.source_id
            ));
        }
        for sink in &status.sinks {
            let failing = sink.failing_for_secs();
            if sink.required && failing > max_failing {
                problems.push(format!("required sink {} has kept failing for {failing:.0}s", sink.id));
            }
            if sink.required && sink.state() == SinkState::Failed {
                problems.push(format!("required sink {} failed", sink.id));
            }
        }
        if let Some(max) = self.slo.max_lag_seconds {
            for sink in status.sinks.iter().filter(|s| s.state() != SinkState::Detached) {
                let lag = sink.lag_seconds().max(status.source.lag_seconds());
                let name = format!("max_lag_seconds:{}", sink.id);
                let breached = self.judge(&name, lag > max as f64);
                metrics::gauge!("sluice_slo_breached", "pipeline" => status.name.clone(), "slo" => "max_lag_seconds", "sink" => sink.id.clone())
                    .set(if breached { 1.0 } else { 0.0 });
                if breached {
                    problems.push(format!(
                        "sink {} lags {lag:.0}s behind the source, over slo.max_lag_seconds {max}",
                        sink.id
                    ));
                    breaches.insert(name);
                }
            }
        }
        if let Some(max) = self.slo.max_retained_wal_bytes {
            let retained = log.as_ref().and_then(|l| l.retained_bytes()).unwrap_or(0);
            let over = self.judge("max_retained_wal_bytes", retained > max);
            metrics::gauge!("sluice_slo_breached", "pipeline" => status.name.clone(), "slo" => "max_retained_wal_bytes", "sink" => "")
                .set(if over { 1.0 } else { 0.0 });
            if over {
                problems.push(format!(
                    "the replication slot retains {retained} bytes of WAL, over slo.max_retained_wal_bytes {max}"
                ));
                breaches.insert("max_retained_wal_bytes".to_string());
                if self.slo.detach_optional_sinks {
                    self.detach_holder(retained, max);
                }
            }
        }
        for started in breaches.difference(&self.breached) {
            warn!(pipeline = %status.name, slo = %started, problems = ?problems, "SLO breached");
        }
        for ended in self.breached.difference(&breaches) {
            info!(pipeline = %status.name, slo = %ended, "SLO met again");
        }
        self.breached = breaches;
        status.set_problems(problems);
    }

    /// Whether limit `name` counts as breached, given whether it is passed
    /// at this check: a state changes only after enough checks in a row.
    fn judge(&mut self, name: &str, over: bool) -> bool {
        let breached = self.breached.contains(name);
        if over == breached {
            self.streaks.remove(name);
            return breached;
        }
        let streak = self.streaks.entry(name.to_string()).or_insert(0);
        *streak += 1;
        let needed = if breached { self.slo.clear_after_secs } else { self.slo.breach_after_secs };
        if *streak >= needed.max(1) {
            self.streaks.remove(name);
            return !breached;
        }
        breached
    }

    /// Detaches the optional sink whose checkpoint holds the source back
    /// the most, if the lowest checkpoint is an optional sink's.
    fn detach_holder(&self, retained: u64, max: u64) {
        let status = &self.status;
        let holding = status
            .sinks
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state() != SinkState::Detached)
            .min_by_key(|(_, s)| s.checkpoint_events.load(Ordering::Relaxed));
        let Some((index, sink)) = holding else { return };
        let lowest = sink.checkpoint_events.load(Ordering::Relaxed);
        // Several sinks at the same checkpoint all hold the log; detaching
        // one of them would free nothing if a required one is among them.
        let tied_required = status.sinks.iter().any(|s| {
            s.required && s.state() != SinkState::Detached && s.checkpoint_events.load(Ordering::Relaxed) == lowest
        });
        if sink.required || tied_required {
            return;
        }
        let reason = format!(
            "the replication slot retained {retained} bytes of WAL, over slo.max_retained_wal_bytes {max}, and this optional sink held it back"
        );
        if self.control.request_detach(index, reason) {
            warn!(pipeline = %status.name, sink = %sink.id, "detaching an optional sink that pins WAL past the SLO");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn monitor(breach_after_secs: u64, clear_after_secs: u64) -> Monitor {
        let handle = PipelineHandle::new("p", "s", "generator", Vec::new());
        Monitor::new(handle, SloConfig { breach_after_secs, clear_after_secs, ..SloConfig::default() })
    }

    /// Feeds `over` per check, carrying the breach state as `check` does.
    fn run(monitor: &mut Monitor, over: &[bool]) -> Vec<bool> {
        over.iter()
            .map(|over| {
                let breached = monitor.judge("lag", *over);
                monitor.breached = if breached { BTreeSet::from(["lag".to_string()]) } else { BTreeSet::new() };
                breached
            })
            .collect()
    }

    #[test]
    fn a_breach_needs_its_streak_and_so_does_its_end() {
        let mut m = monitor(3, 2);
        let flapping = [true, false, true, true, false, true, true, true, false, true, false, false, true];
        let want = [false, false, false, false, false, false, false, true, true, true, true, false, false];
        assert_eq!(run(&mut m, &flapping), want);
    }

    #[test]
    fn one_second_settings_follow_the_figure_at_once() {
        let mut m = monitor(1, 1);
        assert_eq!(run(&mut m, &[true, false, true]), [true, false, true]);
    }
}
