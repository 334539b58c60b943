//! The SLO monitor: once a second it checks a pipeline against its
//! service levels and health rules, and says why it is not ready.
//!
//! A limit must be passed for `slo.breach_after_secs` consecutive checks
//! before it counts as breached, and met for `slo.clear_after_secs` before
//! the breach ends, so a figure that hovers at the limit does not flap. A
//! breach is logged once when it starts and once when it ends, sets
//! `sluice_slo_breached`, and is listed as a problem, which makes `/ready`
//! answer 503. With `slo.detach_optional_sinks`, a retained-WAL breach
//! caused by an optional sink detaches that sink. `slo.max_duplicate_ratio`
//! watches each at-least-once sink's share of events written again after
//! failed calls over a sliding window, so an operator learns when a
//! consumer's dedup is being leaned on hard.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sluice_config::SloConfig;
use tracing::{info, warn};

use crate::control::{PipelineControl, PipelineHandle};
use crate::latency::now_us;
use crate::status::{PipelineStatus, SinkState, SinkStatus};

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
    /// Per sink, its (time, events written again, events written) once a
    /// check, over the duplicate window.
    written: Vec<VecDeque<(Instant, u64, u64)>>,
}

impl Monitor {
    pub fn new(handle: PipelineHandle, slo: SloConfig) -> Self {
        Self {
            status: handle.status,
            control: handle.control,
            slo,
            breached: BTreeSet::new(),
            streaks: BTreeMap::new(),
            written: Vec::new(),
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
        self.check_at(Instant::now());
    }

    /// The check, as at `now` (a test moves the clock).
    fn check_at(&mut self, now: Instant) {
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
        if let Some(max) = self.slo.max_duplicate_ratio {
            for (index, sink) in status.sinks.iter().enumerate() {
                if !matches!(sink.guarantee, sluice_core::Guarantee::AtLeastOnce { .. }) {
                    continue;
                }
                let (again, written) = self.written_in_window(index, sink, now);
                let ratio = if written == 0 { 0.0 } else { again as f64 / written as f64 };
                let labels = [("pipeline", status.name.clone()), ("sink", sink.id.clone())];
                metrics::gauge!("sluice_sink_duplicate_ratio", &labels).set(ratio);
                let name = format!("max_duplicate_ratio:{}", sink.id);
                let breached = self.judge(&name, ratio > max);
                metrics::gauge!("sluice_slo_breached", "pipeline" => status.name.clone(), "slo" => "max_duplicate_ratio", "sink" => sink.id.clone())
                    .set(if breached { 1.0 } else { 0.0 });
                if breached {
                    problems.push(format!(
                        "sink {} wrote {again} of its last {written} events again after failed calls ({:.1} % in {}s), over slo.max_duplicate_ratio {max}",
                        sink.id,
                        ratio * 100.0,
                        self.slo.duplicate_window_secs
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

    /// Events sink `index` wrote again after failed calls, and events it
    /// wrote in all, over the duplicate window (from the oldest sample in
    /// it to now).
    fn written_in_window(&mut self, index: usize, sink: &SinkStatus, now: Instant) -> (u64, u64) {
        if self.written.len() <= index {
            self.written.resize_with(index + 1, VecDeque::new);
        }
        let samples = &mut self.written[index];
        let window = Duration::from_secs(self.slo.duplicate_window_secs);
        samples.push_back((now, sink.replayed.load(Ordering::Relaxed), sink.events.load(Ordering::Relaxed)));
        while samples.len() > 1 && samples.front().is_some_and(|(at, _, _)| now.duration_since(*at) > window) {
            samples.pop_front();
        }
        match (samples.front(), samples.back()) {
            (Some((_, again_then, written_then)), Some((_, again, written))) => {
                (again.saturating_sub(*again_then), written.saturating_sub(*written_then))
            }
            _ => (0, 0),
        }
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

    #[test]
    fn a_sink_writing_too_many_events_again_breaches_the_duplicate_ratio_until_the_window_passes() {
        use crate::status::SinkInfo;
        let sinks = vec![
            SinkInfo {
                id: "hook".into(),
                guarantee: sluice_core::Guarantee::AtLeastOnce { dedup: "id" },
                required: true,
            },
            SinkInfo {
                id: "lake".into(),
                guarantee: sluice_core::Guarantee::ExactlyOnce { condition: None },
                required: true,
            },
        ];
        let handle = PipelineHandle::new("p", "s", "generator", sinks);
        let status = handle.status.clone();
        let slo = SloConfig {
            max_duplicate_ratio: Some(0.1),
            duplicate_window_secs: 1,
            breach_after_secs: 1,
            clear_after_secs: 1,
            ..SloConfig::default()
        };
        let mut monitor = Monitor::new(handle, slo);
        let write = |index: usize, events: u64, again: u64| {
            status.sinks[index].events.fetch_add(events, Ordering::Relaxed);
            status.sinks[index].replayed.fetch_add(again, Ordering::Relaxed);
        };
        let duplicates =
            || -> Vec<String> { status.problems().into_iter().filter(|p| p.contains("max_duplicate_ratio")).collect() };
        let start = Instant::now();
        let at = |millis: u64| start + Duration::from_millis(millis);
        monitor.check_at(at(0));
        write(0, 100, 5);
        write(1, 100, 50);
        monitor.check_at(at(300));
        assert!(duplicates().is_empty(), "5 % is under 10 %, and exactly-once sinks are not watched");
        write(0, 100, 30);
        monitor.check_at(at(600));
        let problems = duplicates();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("sink hook wrote 35 of its last 200 events again"), "{problems:?}");
        // Once the window has passed with clean writes, the breach ends.
        write(0, 100, 0);
        monitor.check_at(at(1700));
        assert!(duplicates().is_empty(), "{:?}", duplicates());
    }
}
