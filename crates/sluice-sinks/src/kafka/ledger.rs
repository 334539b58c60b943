//! Delivery reports without a channel per message.
//!
//! Each message carries its sequence number as librdkafka's opaque. The
//! producer's context, on librdkafka's polling thread, marks that entry of
//! the ledger delivered or failed, and the writing task takes the entries
//! off the front in the order it produced them. A future per message (as
//! rdkafka's `FutureProducer` makes) cost each message two allocations,
//! both freed on the polling thread, and a channel's wake-up: a tenth of
//! the CPU of a drain into Kafka.

use std::collections::VecDeque;
use std::sync::Mutex;

use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::ProducerContext;
use rdkafka::ClientContext;
use sluice_core::Position;
use sluice_core::sync::lock;
use tokio::sync::Notify;

use super::context::Watched;

/// The producer's context: the refusals it reports, and the ledger.
pub struct Ledger {
    watched: Watched,
    book: Mutex<Book>,
    arrived: Notify,
}

#[derive(Default)]
struct Book {
    /// The sequence number of the entry at the front.
    first: u64,
    entries: VecDeque<Entry>,
}

struct Entry {
    /// The event's position; `None` for the checkpoint record.
    position: Option<Position>,
    outcome: Outcome,
}

enum Outcome {
    Pending,
    Delivered,
    Failed(KafkaError),
}

/// A settled entry: whose it was, and how it went.
pub struct Settled {
    pub position: Option<Position>,
    pub result: Result<(), KafkaError>,
}

impl Ledger {
    pub fn new(watched: Watched) -> Self {
        Ledger { watched, book: Mutex::new(Book::default()), arrived: Notify::new() }
    }

    /// Enters a message about to be produced; its sequence number is the
    /// opaque to produce it with.
    pub fn enter(&self, position: Option<Position>) -> usize {
        let mut book = lock(&self.book);
        book.entries.push_back(Entry { position, outcome: Outcome::Pending });
        (book.first + book.entries.len() as u64 - 1) as usize
    }

    /// Takes back the last entry: librdkafka did not take its message.
    pub fn take_back(&self) {
        lock(&self.book).entries.pop_back();
    }

    /// Drops every entry: a write starts with none of an earlier one's
    /// (whose reports, should they still come, are then ignored).
    pub fn forget(&self) {
        let mut book = lock(&self.book);
        book.first += book.entries.len() as u64;
        book.entries.clear();
    }

    pub fn len(&self) -> usize {
        lock(&self.book).entries.len()
    }

    /// Waits for the report of the oldest entry and takes it off; `None`
    /// when there is none.
    pub async fn settle_oldest(&self) -> Option<Settled> {
        loop {
            // Made before the look, so a report in between leaves a permit.
            let arrived = self.arrived.notified();
            {
                let mut book = lock(&self.book);
                let front = book.entries.front()?;
                if !matches!(front.outcome, Outcome::Pending) {
                    let entry = book.entries.pop_front()?;
                    book.first += 1;
                    let result = match entry.outcome {
                        Outcome::Failed(error) => Err(error),
                        _ => Ok(()),
                    };
                    return Some(Settled { position: entry.position, result });
                }
            }
            arrived.await;
        }
    }

    fn report(&self, seq: usize, outcome: Outcome) {
        {
            let mut book = lock(&self.book);
            let Some(index) = (seq as u64).checked_sub(book.first) else {
                return;
            };
            match book.entries.get_mut(index as usize) {
                Some(entry) => entry.outcome = outcome,
                None => return,
            }
        }
        self.arrived.notify_one();
    }
}

impl ClientContext for Ledger {
    fn error(&self, error: KafkaError, reason: &str) {
        self.watched.error(error, reason);
    }
}

impl ProducerContext for Ledger {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        let outcome = match result {
            Ok(_) => Outcome::Delivered,
            Err((error, _)) => Outcome::Failed(error.clone()),
        };
        self.report(seq, outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode;

    fn at(seq: u32) -> Option<Position> {
        Some(Position::Generator { tx: 1, seq })
    }

    #[tokio::test]
    async fn entries_settle_in_order_whatever_order_their_reports_come_in() {
        let ledger = std::sync::Arc::new(Ledger::new(Watched::default()));
        let seqs: Vec<usize> = (0..3).map(|i| ledger.enter(at(i))).collect();
        assert_eq!(seqs, [0, 1, 2]);
        ledger.report(2, Outcome::Delivered);
        ledger.report(1, Outcome::Failed(KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)));
        let waiting = {
            let ledger = ledger.clone();
            tokio::spawn(async move { ledger.settle_oldest().await.map(|s| (s.position, s.result.is_ok())) })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the oldest has no report yet");
        ledger.report(0, Outcome::Delivered);
        assert_eq!(waiting.await.unwrap(), Some((at(0), true)));
        let failed = ledger.settle_oldest().await.unwrap();
        assert_eq!(failed.position, at(1));
        assert!(failed.result.is_err());
        assert!(ledger.settle_oldest().await.unwrap().result.is_ok());
        assert!(ledger.settle_oldest().await.is_none());
    }

    #[tokio::test]
    async fn a_forgotten_write_leaves_nothing_and_its_late_reports_are_ignored() {
        let ledger = Ledger::new(Watched::default());
        ledger.enter(at(0));
        ledger.enter(at(1));
        ledger.forget();
        assert_eq!(ledger.len(), 0);
        let seq = ledger.enter(at(2));
        assert_eq!(seq, 2);
        ledger.report(0, Outcome::Failed(KafkaError::Canceled));
        ledger.report(seq, Outcome::Delivered);
        let settled = ledger.settle_oldest().await.unwrap();
        assert_eq!((settled.position, settled.result.is_ok()), (at(2), true));
    }

    #[test]
    fn an_entry_taken_back_gives_its_number_to_the_next() {
        let ledger = Ledger::new(Watched::default());
        assert_eq!(ledger.enter(at(0)), 0);
        assert_eq!(ledger.enter(at(1)), 1);
        ledger.take_back();
        assert_eq!(ledger.enter(at(1)), 1);
        assert_eq!(ledger.len(), 2);
    }
}
