//! The SLO monitor: once a second it checks a pipeline against its
//! service levels and health rules, and says why it is not ready.
//!
//! A breach is logged once when it starts and once when it ends, sets
//! `sluice_slo_breached`, and is listed as a problem, which makes `/ready`
//! answer 503. With `slo.detach_optional_sinks`, a retained-WAL breach
//! caused by an optional sink detaches that sink.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sluice_config::SloConfig;
use tracing::{info, warn};

use crate::control::{PipelineControl, PipelineHandle};
use crate::latency::now_us;
use crate::status::{CAUGHT_UP_BYTES, PipelineStatus, SinkState};

const CHECK_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct Monitor {
    status: Arc<PipelineStatus>,
    /// Detaches an optional sink that pins the source's log.
    control: PipelineControl,
    slo: SloConfig,
    /// Breaches seen at the last check, by name.
    breached: BTreeSet<String>,
}

impl Monitor {
    pub fn new(handle: PipelineHandle, slo: SloConfig) -> Self {
        Self { status: handle.status, control: handle.control, slo, breached: BTreeSet::new() }
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
        let status = &self.status;
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
        let idle_secs = if last_read == 0 { 0.0 } else { (now_us() - last_read) as f64 / 1e6 };
        if behind >= CAUGHT_UP_BYTES && idle_secs > max_failing && !status.is_paused() {
            problems.push(format!(
                "source {} is stalled: nothing read for {idle_secs:.0}s while {behind} bytes behind the server's head",
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
                let lag = sink.lag_seconds() + status.source.lag_seconds();
                let name = format!("max_lag_seconds:{}", sink.id);
                metrics::gauge!("sluice_slo_breached", "pipeline" => status.name.clone(), "slo" => "max_lag_seconds", "sink" => sink.id.clone())
                    .set(if lag > max as f64 { 1.0 } else { 0.0 });
                if lag > max as f64 {
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
            let over = retained > max;
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
