//! Transaction-aware batching.
//!
//! The batcher cuts the event stream into batches bounded by
//! `max_events`, `max_bytes` and `max_ms`. With `respect_source_tx` it cuts
//! only after an event with `tx_end`: when a limit is reached mid-
//! transaction, it cuts after the last whole transaction in the batch and
//! carries the partial one over; a single transaction larger than the limits
//! makes one batch that grows until the transaction ends.

use std::sync::Arc;

use sluice_config::BatchConfig;
use sluice_core::{Event, Position};
use tokio::time::{Duration, Instant};

/// Contiguous events in source order, shared by every sink writer.
#[derive(Debug)]
pub struct Batch {
    /// Counts batches of one run, from 1.
    pub seq: u64,
    pub events: Vec<Event>,
    pub byte_size: usize,
}

impl Batch {
    pub fn first(&self) -> &Position {
        &self.events[0].position
    }

    pub fn last(&self) -> &Position {
        &self.events[self.events.len() - 1].position
    }

    /// The events strictly after `position`: what a sink at that checkpoint
    /// still needs. Events are in position order, so this is a suffix.
    pub fn after(&self, position: Option<&Position>) -> &[Event] {
        match position {
            None => &self.events,
            Some(p) => {
                let start = self.events.partition_point(|e| e.position <= *p);
                &self.events[start..]
            }
        }
    }
}

pub struct Batcher {
    limits: BatchConfig,
    current: Vec<Event>,
    byte_size: usize,
    /// Length of the prefix of `current` that ends on a transaction end.
    whole_tx_len: usize,
    opened_at: Option<Instant>,
    /// The age limit passed mid-transaction: cut at the next transaction end.
    age_expired: bool,
    next_seq: u64,
}

impl Batcher {
    pub fn new(limits: BatchConfig) -> Self {
        Self {
            current: Vec::with_capacity(limits.max_events.min(1 << 16)),
            limits,
            byte_size: 0,
            whole_tx_len: 0,
            opened_at: None,
            age_expired: false,
            next_seq: 1,
        }
    }

    /// When the open batch must be cut by age, if one is open.
    pub fn deadline(&self) -> Option<Instant> {
        if self.age_expired {
            return None;
        }
        self.opened_at
            .map(|t| t + Duration::from_millis(self.limits.max_ms))
    }

    /// The age limit passed: cuts the whole transactions, or, if there are
    /// none yet, arranges a cut at the next transaction end.
    pub fn on_deadline(&mut self) -> Option<Arc<Batch>> {
        let batch = self.cut();
        if batch.is_none() && !self.current.is_empty() {
            self.age_expired = true;
        }
        batch
    }

    /// Adds one event; returns a batch when a size limit cut one.
    pub fn push(&mut self, event: Event) -> Option<Arc<Batch>> {
        if self.opened_at.is_none() {
            self.opened_at = Some(Instant::now());
        }
        self.byte_size += event.approx_byte_size();
        let tx_end = event.tx_end;
        self.current.push(event);
        if tx_end {
            self.whole_tx_len = self.current.len();
        }
        let full =
            self.current.len() >= self.limits.max_events || self.byte_size >= self.limits.max_bytes;
        if full || (self.age_expired && tx_end) {
            self.cut()
        } else {
            None
        }
    }

    /// Cuts what may be cut now: everything, or with `respect_source_tx`
    /// every whole transaction. Used for size and age limits.
    pub fn cut(&mut self) -> Option<Arc<Batch>> {
        let len = if self.limits.respect_source_tx {
            self.whole_tx_len
        } else {
            self.current.len()
        };
        self.take(len)
    }

    /// Cuts whatever whole transactions are left, at the end of the stream
    /// or at shutdown. A trailing partial transaction is dropped: its
    /// events are not checkpointed, so a restart reads them again.
    pub fn finish(&mut self) -> Option<Arc<Batch>> {
        let batch = self.cut();
        self.current.clear();
        self.whole_tx_len = 0;
        self.byte_size = 0;
        self.opened_at = None;
        self.age_expired = false;
        batch
    }

    fn take(&mut self, len: usize) -> Option<Arc<Batch>> {
        if len == 0 {
            return None;
        }
        let rest = self.current.split_off(len);
        let events = std::mem::replace(&mut self.current, rest);
        let byte_size = if self.current.is_empty() {
            std::mem::take(&mut self.byte_size)
        } else {
            let rest_bytes: usize = self.current.iter().map(Event::approx_byte_size).sum();
            std::mem::replace(&mut self.byte_size, rest_bytes) - rest_bytes
        };
        self.whole_tx_len = 0;
        self.age_expired = false;
        self.opened_at = if self.current.is_empty() {
            None
        } else {
            Some(Instant::now())
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(Arc::new(Batch {
            seq,
            events,
            byte_size,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Op;

    /// Events of `txs` transactions with the given sizes.
    fn stream(sizes: &[u32]) -> Vec<Event> {
        let mut events = Vec::new();
        for (index, size) in sizes.iter().enumerate() {
            let tx = index as u64 + 1;
            for seq in 0..*size {
                events.push(Event {
                    op: Op::Insert,
                    source_id: "s".into(),
                    database: "d".into(),
                    table: "t".into(),
                    key: None,
                    before: None,
                    after: None,
                    schema_version: 1,
                    position: Position::Generator { tx, seq },
                    tx_id: tx.to_string().into(),
                    tx_end: seq + 1 == *size,
                    commit_time_us: 0,
                });
            }
        }
        events
    }

    fn limits(max_events: usize, respect_source_tx: bool) -> BatchConfig {
        BatchConfig {
            max_events,
            respect_source_tx,
            ..BatchConfig::default()
        }
    }

    fn run(batcher: &mut Batcher, events: Vec<Event>) -> Vec<Vec<Position>> {
        let mut batches: Vec<_> = events.into_iter().filter_map(|e| batcher.push(e)).collect();
        batches.extend(batcher.finish());
        batches
            .iter()
            .map(|b| b.events.iter().map(|e| e.position.clone()).collect())
            .collect()
    }

    #[test]
    fn cuts_at_the_last_whole_transaction() {
        let mut batcher = Batcher::new(limits(4, true));
        let batches = run(&mut batcher, stream(&[3, 3, 2]));
        let sizes: Vec<_> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 2]);
    }

    #[test]
    fn a_transaction_larger_than_the_limit_grows_one_batch() {
        let mut batcher = Batcher::new(limits(2, true));
        let sizes: Vec<_> = run(&mut batcher, stream(&[1, 7, 1]))
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [1, 7, 1]);
    }

    #[test]
    fn without_respect_for_transactions_batches_are_exact() {
        let mut batcher = Batcher::new(limits(4, false));
        let sizes: Vec<_> = run(&mut batcher, stream(&[3, 3, 3]))
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [4, 4, 1]);
    }

    #[test]
    fn finish_drops_a_trailing_partial_transaction() {
        let mut batcher = Batcher::new(limits(100, true));
        let mut events = stream(&[2, 3]);
        events.pop();
        let batches = run(&mut batcher, events);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].len(), 2);
    }

    #[test]
    fn byte_limit_cuts_too() {
        let mut batcher = Batcher::new(BatchConfig {
            max_bytes: 1,
            ..BatchConfig::default()
        });
        let sizes: Vec<_> = run(&mut batcher, stream(&[2, 2]))
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [2, 2]);
    }

    #[test]
    fn after_filters_a_suffix() {
        let mut batcher = Batcher::new(limits(100, true));
        for event in stream(&[3, 3]) {
            assert!(batcher.push(event).is_none());
        }
        let batch = batcher.finish().unwrap();
        assert_eq!(batch.after(None).len(), 6);
        assert_eq!(
            batch
                .after(Some(&Position::Generator { tx: 1, seq: 1 }))
                .len(),
            4
        );
        assert_eq!(
            batch
                .after(Some(&Position::Generator { tx: 9, seq: 0 }))
                .len(),
            0
        );
        assert_eq!(batch.first(), &Position::Generator { tx: 1, seq: 0 });
        assert_eq!(batch.last(), &Position::Generator { tx: 2, seq: 2 });
    }

    #[test]
    fn age_deadline_exists_only_while_a_batch_is_open() {
        let mut batcher = Batcher::new(limits(100, true));
        assert!(batcher.deadline().is_none());
        let mut events = stream(&[2]).into_iter();
        batcher.push(events.next().unwrap());
        assert!(batcher.deadline().is_some());
        assert!(
            batcher.on_deadline().is_none(),
            "mid-transaction: nothing to cut yet"
        );
        assert!(
            batcher.deadline().is_none(),
            "no timer while waiting for the transaction end"
        );
        let batch = batcher
            .push(events.next().unwrap())
            .expect("the transaction end cuts the overdue batch");
        assert_eq!(batch.events.len(), 2);
        assert!(batcher.deadline().is_none());
    }
}
