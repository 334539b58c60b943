//! Prometheus metrics. Counters and gauges are copied from the pipelines'
//! status at each scrape, so the hot path pays nothing for them; the
//! histograms (latency, batch size) and the Kafka transaction counters
//! are recorded where they happen.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics::{counter, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sluice_config::Config;
use sluice_runtime::status::SinkState;

use super::Api;

/// Installs the global recorder. Batch size buckets run in powers of two
/// up to the largest `batch.max_events` of the config, so a full batch
/// has its own bucket; larger ones (one huge transaction) go to +Inf.
pub fn install(config: &Config) -> Result<PrometheusHandle, anyhow::Error> {
    let max_events = config.pipelines.iter().map(|p| p.batch.max_events).max().unwrap_or(1).max(1) as f64;
    let mut batch_buckets = vec![1.0];
    while *batch_buckets.last().unwrap_or(&max_events) < max_events {
        let next = (batch_buckets.last().unwrap_or(&1.0) * 2.0).min(max_events);
        batch_buckets.push(next);
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full("sluice_sink_batch_events".into()), &batch_buckets)?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    Ok(handle)
}

pub async fn render(State(api): State<Arc<Api>>) -> impl IntoResponse {
    refresh(&api).await;
    let mut text = api.metrics.render();
    write_latency(&mut text, &api);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// `sluice_sink_latency_seconds`, a histogram per sink that the sinks'
/// writers count themselves ([`sluice_runtime::latency_buckets`]), in the
/// form the exporter writes its own.
fn write_latency(out: &mut String, api: &Api) {
    const NAME: &str = "sluice_sink_latency_seconds";
    // Writing into a String cannot fail.
    let _ = writeln!(out, "# TYPE {NAME} histogram");
    for status in api.statuses() {
        for sink in &status.sinks {
            let labels = format!("pipeline=\"{}\",sink=\"{}\"", label_value(&status.name), label_value(&sink.id));
            let counts = sink.latency.read();
            for (bound, events) in &counts.cumulative {
                let _ = writeln!(out, "{NAME}_bucket{{{labels},le=\"{bound}\"}} {events}");
            }
            let _ = writeln!(out, "{NAME}_bucket{{{labels},le=\"+Inf\"}} {}", counts.count);
            let _ = writeln!(out, "{NAME}_sum{{{labels}}} {}", counts.sum_seconds);
            let _ = writeln!(out, "{NAME}_count{{{labels}}} {}", counts.count);
        }
    }
    out.push('\n');
}

/// A label value as the exposition format quotes it.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn gauge_of(value: Option<u64>) -> f64 {
    value.map_or(f64::NAN, |v| v as f64)
}

async fn refresh(api: &Api) {
    let store = api.store.clone();
    let letters = tokio::task::spawn_blocking(move || store.letters()).await.ok().and_then(Result::ok);
    for status in api.statuses() {
        let view = status.view();
        let p = view.name.clone();
        let source = view.source.id.clone();
        gauge!("sluice_pipeline_paused", "pipeline" => p.clone()).set(if status.is_paused() { 1.0 } else { 0.0 });
        gauge!("sluice_pipeline_ready", "pipeline" => p.clone()).set(if view.problems.is_empty() { 1.0 } else { 0.0 });
        for (table, (events, bytes)) in status.source.tables() {
            let labels = [("pipeline", p.clone()), ("source", source.clone()), ("table", table)];
            counter!("sluice_source_events_total", &labels).absolute(events);
            counter!("sluice_source_bytes_total", &labels).absolute(bytes);
        }
        let labels = [("pipeline", p.clone()), ("source", source.clone())];
        counter!("sluice_source_restarts_total", &labels).absolute(view.source.restarts);
        gauge!("sluice_source_lag_bytes", &labels).set(gauge_of(view.source.behind_bytes));
        gauge!("sluice_source_lag_seconds", &labels).set(view.source.lag_seconds);
        gauge!("sluice_slot_retained_wal_bytes", &labels).set(gauge_of(view.source.retained_wal_bytes));
        counter!("sluice_pipeline_events_total", "pipeline" => p.clone()).absolute(view.head_events);
        for step in &view.transforms {
            let labels = [("pipeline", p.clone()), ("step", step.step.to_string()), ("type", step.kind.to_string())];
            transform_counts(&labels, step);
        }
        counter!("sluice_pipeline_batches_total", "pipeline" => p.clone())
            .absolute(status.batches_cut.load(Ordering::Relaxed));
        for sink in &view.sinks {
            for step in &sink.transforms {
                let labels = [
                    ("pipeline", p.clone()),
                    ("sink", sink.id.clone()),
                    ("step", step.step.to_string()),
                    ("type", step.kind.to_string()),
                ];
                transform_counts(&labels, step);
            }
            let labels = [("pipeline", p.clone()), ("sink", sink.id.clone())];
            counter!("sluice_sink_events_total", &labels).absolute(sink.events);
            counter!("sluice_sink_batches_total", &labels).absolute(sink.batches);
            counter!("sluice_sink_bytes_total", &labels).absolute(sink.bytes);
            counter!("sluice_sink_errors_total", &labels).absolute(sink.errors);
            counter!("sluice_sink_retries_total", &labels).absolute(sink.retries);
            counter!("sluice_sink_replay_skipped_events_total", &labels).absolute(sink.replay_skipped);
            counter!("sluice_sink_replayed_events_total", &labels).absolute(sink.replayed);
            counter!("sluice_sink_dead_lettered_total", &labels).absolute(sink.dead_lettered);
            counter!("sluice_sink_dropped_events_total", &labels).absolute(sink.dropped);
            gauge!("sluice_sink_lag_events", &labels).set(sink.lag_events as f64);
            gauge!("sluice_sink_lag_bytes", &labels).set(sink.lag_bytes as f64);
            gauge!("sluice_sink_lag_seconds", &labels).set(sink.lag_seconds);
            gauge!("sluice_sink_durable_events", &labels).set(sink.durable_events as f64);
            gauge!("sluice_sink_checkpoint_events", &labels).set(sink.checkpoint_events as f64);
            let completeness =
                if view.head_events == 0 { 1.0 } else { sink.durable_events as f64 / view.head_events as f64 };
            gauge!("sluice_sink_completeness_ratio", &labels).set(completeness);
            let up = matches!(sink.state, SinkState::Running | SinkState::Starting | SinkState::Closed);
            gauge!("sluice_sink_up", &labels).set(if up { 1.0 } else { 0.0 });
            gauge!("sluice_sink_detached", &labels).set(if sink.detached.is_some() { 1.0 } else { 0.0 });
            if let Some(letters) = &letters {
                let depth = letters.iter().filter(|l| l.source_id == source && l.sink_id == sink.id).count();
                gauge!("sluice_dlq_depth", &labels).set(depth as f64);
            }
        }
    }
}

/// What one transform step did: the pipeline's, or with a `sink` label a
/// sink's own.
fn transform_counts(labels: &[(&'static str, String)], step: &sluice_runtime::status::TransformView) {
    counter!("sluice_transform_events_in_total", labels).absolute(step.events_in);
    counter!("sluice_transform_events_out_total", labels).absolute(step.events_out);
    counter!("sluice_transform_dropped_total", labels).absolute(step.dropped);
    counter!("sluice_transform_errored_total", labels).absolute(step.errored);
}
