//! A table's events handed on in pieces as they are made.
//!
//! Readers fetch rows in chunks of `chunk_size` (10,000 by default) to keep
//! round trips few, but every queue between a reader and the sinks counts
//! what it holds in sends, not in events. Sending a whole chunk at a time
//! put about ten chunks' worth of events in memory at once, most of a
//! snapshot's peak memory; sent in pieces, those queues hold a few pieces.

use crate::event::Event;

use super::ChunkSender;

/// The most events one piece holds.
pub const PIECE_EVENTS: usize = 2048;

/// Collects events and sends them in pieces of [`PIECE_EVENTS`].
pub struct Pieces<'a> {
    out: &'a ChunkSender,
    events: Vec<Event>,
}

impl<'a> Pieces<'a> {
    pub fn new(out: &'a ChunkSender) -> Self {
        Self { out, events: Vec::new() }
    }

    /// Adds `event`, sending the piece once it is full. `false` once the
    /// snapshot no longer takes events (it was stopped).
    pub async fn push(&mut self, event: Event) -> bool {
        if self.events.capacity() == 0 {
            self.events = crate::event_vecs::take(PIECE_EVENTS);
        }
        self.events.push(event);
        self.events.len() < PIECE_EVENTS || self.send().await
    }

    /// Sends what is held, if anything. `false` once the snapshot no
    /// longer takes events.
    pub async fn send(&mut self) -> bool {
        if self.events.is_empty() {
            return true;
        }
        self.out.send(Ok(std::mem::take(&mut self.events))).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::run::tests::row;
    use tokio::sync::mpsc;

    fn event_at(id: u64) -> Event {
        row(&"public.t".into(), id as i64)
    }

    #[tokio::test]
    async fn events_go_out_in_order_in_pieces_of_at_most_the_limit() {
        let (tx, mut rx) = mpsc::channel(16);
        let total = PIECE_EVENTS * 2 + 5;
        let mut pieces = Pieces::new(&tx);
        for i in 0..total {
            assert!(pieces.push(event_at(i as u64)).await);
        }
        assert!(pieces.send().await);
        drop(pieces);
        drop(tx);
        let mut sizes = Vec::new();
        let mut seen = Vec::new();
        while let Some(chunk) = rx.recv().await {
            let chunk = chunk.unwrap();
            sizes.push(chunk.len());
            seen.extend(chunk.into_iter().map(|e| e.position));
        }
        assert_eq!(sizes, vec![PIECE_EVENTS, PIECE_EVENTS, 5]);
        let expected: Vec<_> = (0..total).map(|i| event_at(i as u64).position).collect();
        assert_eq!(seen, expected);
    }

    #[tokio::test]
    async fn a_closed_snapshot_is_reported_and_nothing_is_sent_for_nothing_held() {
        let (tx, rx) = mpsc::channel(16);
        let mut pieces = Pieces::new(&tx);
        assert!(pieces.send().await, "nothing held: nothing to send, not a failure");
        drop(rx);
        for i in 0..PIECE_EVENTS - 1 {
            assert!(pieces.push(event_at(i as u64)).await);
        }
        assert!(!pieces.push(event_at(PIECE_EVENTS as u64)).await);
    }
}
