//! The `sluice_sink_latency_seconds` histogram of /metrics, counted here
//! rather than by the metrics exporter. The exporter keeps every sample
//! (24 bytes and a clock read each) until its next upkeep, so at a million
//! events a second it held tens of MB and spent a few percent of the CPU
//! on them. The events of one commit run share their latency, so here a
//! run costs three atomic adds, whatever its size.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bucket bounds (s): from a few ms, where a fast sink lands, to ten
/// minutes, past any sane object storage flush.
pub const LATENCY_BUCKETS: [f64; 16] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0];

#[derive(Default)]
pub struct LatencyBuckets {
    /// Events in each bucket alone (not cumulative); past the last bound
    /// they are only in `count`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

/// What [`LatencyBuckets::read`] returns, as Prometheus shows a histogram.
pub struct LatencyCounts {
    /// Each bound with the events at or below it.
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl LatencyBuckets {
    /// Counts `events` that took `seconds` each.
    pub fn record(&self, seconds: f64, events: u64) {
        // The count first: a reader that sees a bucket's new figure then
        // sees a count at least as large.
        self.count.fetch_add(events, Ordering::SeqCst);
        self.sum_us.fetch_add((seconds.max(0.0) * 1e6).round() as u64 * events, Ordering::Relaxed);
        let index = LATENCY_BUCKETS.partition_point(|bound| *bound < seconds);
        if let Some(bucket) = self.buckets.get(index) {
            bucket.fetch_add(events, Ordering::SeqCst);
        }
    }

    pub fn read(&self) -> LatencyCounts {
        let mut total = 0;
        let cumulative = LATENCY_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(bound, bucket)| {
                total += bucket.load(Ordering::SeqCst);
                (*bound, total)
            })
            .collect();
        let count = self.count.load(Ordering::SeqCst).max(total);
        LatencyCounts { cumulative, count, sum_seconds: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_land_in_the_first_bucket_whose_bound_holds_them() {
        let histogram = LatencyBuckets::default();
        histogram.record(0.005, 3);
        histogram.record(0.02, 2);
        histogram.record(700.0, 1);
        let counts = histogram.read();
        assert_eq!(counts.cumulative[0], (0.005, 3), "a bound is inclusive, as Prometheus' `le` is");
        assert_eq!(counts.cumulative[1], (0.01, 3));
        assert_eq!(counts.cumulative[2], (0.025, 5));
        assert_eq!(counts.cumulative.last(), Some(&(600.0, 5)), "past the last bound only +Inf counts it");
        assert_eq!(counts.count, 6);
        assert!((counts.sum_seconds - (0.015 + 0.04 + 700.0)).abs() < 1e-9);
    }
}
