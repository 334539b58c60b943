//! The last hour of each pipeline's figures, sampled inside the server so
//! a dashboard opened now draws the hour before it, not only what it saw.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use sluice_core::sync::lock;
use sluice_runtime::PipelineView;

/// How often a sample is taken.
pub const EVERY: Duration = Duration::from_secs(5);
/// One hour of samples.
const KEPT: usize = 720;

#[derive(Debug, Clone, Serialize)]
struct SinkPoint {
    id: String,
    events_per_sec: f64,
    lag_seconds: f64,
    lag_bytes: u64,
    lag_events: u64,
}

#[derive(Debug, Clone, Serialize)]
struct Point {
    at_us: i64,
    retained_wal_bytes: Option<u64>,
    sinks: Vec<SinkPoint>,
}

#[derive(Default)]
struct Series {
    points: VecDeque<Point>,
    /// Each sink's event count and when it was read, for the next rate.
    last: HashMap<String, (u64, i64)>,
}

#[derive(Default)]
pub struct History {
    pipelines: Mutex<HashMap<String, Series>>,
}

/// What one sample takes of a sink.
struct Figures<'a> {
    id: &'a str,
    events: u64,
    lag_seconds: f64,
    lag_bytes: u64,
    lag_events: u64,
}

impl Series {
    fn push<'a>(&mut self, now_us: i64, retained_wal_bytes: Option<u64>, sinks: impl Iterator<Item = Figures<'a>>) {
        let sinks = sinks
            .map(|s| {
                let rate = match self.last.insert(s.id.to_string(), (s.events, now_us)) {
                    // A re-read starts its counts again: no rate across it.
                    Some((events, at)) if now_us > at && s.events >= events => {
                        (s.events - events) as f64 * 1e6 / (now_us - at) as f64
                    }
                    _ => 0.0,
                };
                SinkPoint {
                    id: s.id.to_string(),
                    events_per_sec: rate.round(),
                    lag_seconds: s.lag_seconds,
                    lag_bytes: s.lag_bytes,
                    lag_events: s.lag_events,
                }
            })
            .collect();
        if self.points.len() == KEPT {
            self.points.pop_front();
        }
        self.points.push_back(Point { at_us: now_us, retained_wal_bytes, sinks });
    }
}

impl History {
    /// Takes one sample of each pipeline at `now_us`.
    pub fn record(&self, views: &[PipelineView], now_us: i64) {
        let mut pipelines = lock(&self.pipelines);
        for view in views {
            let figures = view.sinks.iter().map(|s| Figures {
                id: &s.id,
                events: s.events,
                lag_seconds: s.lag_seconds,
                lag_bytes: s.lag_bytes,
                lag_events: s.lag_events,
            });
            pipelines.entry(view.name.clone()).or_default().push(now_us, view.source.retained_wal_bytes, figures);
        }
    }

    /// The samples of `pipeline`, oldest first.
    pub fn of(&self, pipeline: &str) -> Value {
        let pipelines = lock(&self.pipelines);
        let points: Vec<Value> = pipelines
            .get(pipeline)
            .into_iter()
            .flat_map(|s| &s.points)
            .map(|p| {
                json!({
                    "at": sluice_core::time::format_utc_micros(p.at_us),
                    "retained_wal_bytes": p.retained_wal_bytes,
                    "sinks": p.sinks,
                })
            })
            .collect();
        json!({ "pipeline": pipeline, "every_secs": EVERY.as_secs(), "points": points })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(series: &mut Series, at_secs: i64, events: u64) {
        let figures = Figures { id: "k", events, lag_seconds: 1.5, lag_bytes: 10, lag_events: 2 };
        series.push(at_secs * 1_000_000, Some(7), std::iter::once(figures));
    }

    #[test]
    fn rates_come_from_consecutive_counts_and_an_hour_is_kept() {
        let mut series = Series::default();
        sample(&mut series, 0, 100);
        sample(&mut series, 5, 600);
        // A re-read counts from 0 again: no negative rate.
        sample(&mut series, 10, 50);
        let rates: Vec<f64> = series.points.iter().map(|p| p.sinks[0].events_per_sec).collect();
        assert_eq!(rates, [0.0, 100.0, 0.0]);
        for i in 0..KEPT as i64 {
            sample(&mut series, 15 + 5 * i, 50);
        }
        assert_eq!(series.points.len(), KEPT);
        assert_eq!(series.points.front().map(|p| p.at_us), Some(15_000_000), "the oldest samples leave first");
    }
}
