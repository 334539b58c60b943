//! End-to-end latency per sink: from the source commit to the moment the
//! sink made the event durable, recorded when the writer learns it is.
//!
//! A log-linear histogram (16 buckets per power of two, so a percentile
//! is at most 1/16 above the true value) over microseconds, with atomic
//! counters so it can be read while the writer records.
//!
//! It records only figures it can stand behind: an event with no commit
//! time (0 or less) is left out, and so is one that committed longer ago
//! than the histogram's range ([`RANGE_US`], about 25 days), which is
//! counted apart instead of being reported as the range's top.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// The top bucket ends just below 2^41 µs.
const MAX_EXPONENT: u32 = 40;
/// Latencies at or above this (2^41 µs, about 25 days) are out of range.
pub const RANGE_US: u64 = 1 << (MAX_EXPONENT + 1);
const BUCKETS: usize = ((MAX_EXPONENT - SUB_BITS + 2) as u64 * SUB) as usize;

pub struct Latency {
    counts: Vec<AtomicU64>,
    max_us: AtomicU64,
    /// Events that committed [`RANGE_US`] or more before they were durable.
    out_of_range: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_us: AtomicU64::new(0),
            out_of_range: AtomicU64::new(0),
        }
    }
}

fn bucket(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    if us >> (MAX_EXPONENT + 1) != 0 {
        return BUCKETS - 1;
    }
    let exponent = 63 - us.leading_zeros();
    let sub = (us >> (exponent - SUB_BITS)) & (SUB - 1);
    ((exponent - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The highest value that falls in `index`.
fn upper_bound(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB {
        return index;
    }
    let exponent = (index / SUB) as u32 + SUB_BITS - 1;
    let sub = index % SUB;
    ((SUB + sub + 1) << (exponent - SUB_BITS)) - 1
}

/// What can be said of an event's latency.
enum Measured {
    Us(u64),
    /// The event carries no commit time (0 or less).
    NoCommitTime,
    /// It committed [`RANGE_US`] or more before `now_us`.
    OutOfRange,
}

/// The latency of an event that committed at `commit_us` and became
/// durable at `now_us`; a commit stamped in the future counts as zero.
fn measurable_us(commit_us: i64, now_us: i64) -> Measured {
    if commit_us <= 0 {
        return Measured::NoCommitTime;
    }
    match now_us.saturating_sub(commit_us).max(0) as u64 {
        us if us >= RANGE_US => Measured::OutOfRange,
        us => Measured::Us(us),
    }
}

/// Microseconds since the Unix epoch, as sources stamp commit times.
pub fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

impl Latency {
    /// Records `count` events that committed at `commit_us` and became
    /// durable at `now_us`. A commit stamped in the future (another
    /// host's clock) counts as zero; a commit time of 0 or less means the
    /// event carries none and is not recorded; a latency of [`RANGE_US`]
    /// or more is only counted as out of range.
    pub fn record(&self, commit_us: i64, now_us: i64, count: u64) {
        let us = match measurable_us(commit_us, now_us) {
            Measured::Us(us) => us,
            Measured::NoCommitTime => return,
            Measured::OutOfRange => {
                self.out_of_range.fetch_add(count, Ordering::Relaxed);
                return;
            }
        };
        self.counts[bucket(us)].fetch_add(count, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// Events left out for committing [`RANGE_US`] or more before they
    /// were durable.
    pub fn out_of_range(&self) -> u64 {
        self.out_of_range.load(Ordering::Relaxed)
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The latency at or below which `quantile` of the events fell, in
    /// microseconds (the top of its bucket); `None` before any event.
    pub fn quantile_us(&self, quantile: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count.load(Ordering::Relaxed);
            if seen >= rank {
                return Some(upper_bound(index).min(self.max_us()));
            }
        }
        Some(self.max_us())
    }

    pub fn max_us(&self) -> u64 {
        self.max_us.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_falls_in_a_bucket_whose_bounds_hold_it() {
        let mut previous_upper = None;
        for index in 0..BUCKETS - 1 {
            let upper = upper_bound(index);
            assert_eq!(bucket(upper), index, "top of bucket {index}");
            assert_eq!(bucket(upper + 1), index + 1, "just above bucket {index}");
            if let Some(previous) = previous_upper {
                assert!(upper > previous);
            }
            previous_upper = Some(upper);
        }
    }

    #[test]
    fn a_bucket_is_at_most_a_sixteenth_wide() {
        for us in [17u64, 1_000, 12_345, 987_654, 60_000_000] {
            let upper = upper_bound(bucket(us));
            assert!(upper >= us && (upper - us) as f64 <= us as f64 / 16.0, "{us} -> {upper}");
        }
    }

    #[test]
    fn quantiles_follow_the_recorded_distribution() {
        let latency = Latency::default();
        assert_eq!(latency.quantile_us(0.5), None);
        // 90 events at 1 ms, 10 at 100 ms.
        let commit = 1_000_000;
        latency.record(commit, commit + 1_000, 90);
        latency.record(commit, commit + 100_000, 10);
        assert_eq!(latency.count(), 100);
        let p50 = latency.quantile_us(0.5).unwrap();
        assert!((1_000..=1_063).contains(&p50), "p50 {p50}");
        let p99 = latency.quantile_us(0.99).unwrap();
        assert_eq!(p99, 100_000, "p99 is capped by the maximum seen");
        assert_eq!(latency.quantile_us(0.90).unwrap(), p50);
    }

    #[test]
    fn a_commit_stamped_in_the_future_counts_as_zero() {
        let latency = Latency::default();
        latency.record(5_000, 1_000, 1);
        assert_eq!(latency.quantile_us(1.0), Some(0));
    }

    #[test]
    fn an_absent_commit_time_is_not_recorded() {
        let latency = Latency::default();
        latency.record(0, now_us(), 5);
        latency.record(-1, now_us(), 5);
        assert_eq!(latency.count(), 0);
        assert_eq!(latency.quantile_us(0.5), None);
        assert_eq!(latency.out_of_range(), 0);
    }

    #[test]
    fn a_latency_beyond_the_range_is_counted_apart_not_reported_as_the_top() {
        let latency = Latency::default();
        let now = now_us();
        // The generator's synthetic commit times fall months before now.
        latency.record(now - 300 * 86_400_000_000, now, 7);
        latency.record(now - RANGE_US as i64, now, 1);
        assert_eq!(latency.count(), 0);
        assert_eq!(latency.quantile_us(0.99), None);
        assert_eq!(latency.out_of_range(), 8);
        latency.record(now - (RANGE_US as i64 - 1), now, 1);
        assert_eq!(latency.quantile_us(1.0), Some(RANGE_US - 1));
    }
}
