//! Emptied event vectors, kept for the next chunk or batch to fill.
//!
//! An event crosses three vectors on its way to the sinks (the reader's
//! chunk, the intake's, the batch), and each is freed on another thread
//! than the one that fills the next. Freshly allocated, every slot of
//! every vector is a page the kernel faults in and zeroes, and the
//! allocator hands it back a few milliseconds after the free. Kept here,
//! a vector's pages stay resident and are filled again: MariaDB → file,
//! 1M rows, faulted in a third as many pages (about 31,000 against
//! 90,000), for 8 % less CPU and no more memory (docs/benchmarks.md).

use std::sync::Mutex;

use crate::Event;

/// The most bytes of event slots kept: a few batches of the default 2000
/// events, or one of a 10,000-row transaction, and the chunks that fill
/// them. Peak memory is reached while batches are in flight, when the
/// pool is nearly empty anyway.
const KEPT_BYTES: usize = 24 << 20;

/// The most vectors kept, so looking through them stays cheap.
const KEPT_VECTORS: usize = 16;

/// Vectors with room for fewer events are not worth keeping: the
/// allocator serves them from small pages it reuses anyway, and a source
/// that hands on a few events at a time would fill the pool with them.
const SMALLEST_KEPT: usize = 64;

static KEPT: Pool = Pool::new(KEPT_BYTES);

/// An empty vector with room for at least `capacity` events: a kept one
/// when one is large enough and not many times larger.
pub fn take(capacity: usize) -> Vec<Event> {
    KEPT.take(capacity)
}

/// Drops the events and keeps the vector, if there is room for it; when
/// there is not, it takes the place of a smaller one.
pub fn give(events: Vec<Event>) {
    KEPT.give(events)
}

struct Pool {
    kept: Mutex<Kept>,
    limit: usize,
}

struct Kept {
    vectors: Vec<Vec<Event>>,
    /// The slot bytes of `vectors`, kept as they come and go.
    bytes: usize,
}

impl Kept {
    fn remove(&mut self, at: usize) -> Vec<Event> {
        let vector = self.vectors.swap_remove(at);
        self.bytes -= slot_bytes(&vector);
        vector
    }
}

impl Pool {
    const fn new(limit: usize) -> Self {
        Self { kept: Mutex::new(Kept { vectors: Vec::new(), bytes: 0 }), limit }
    }

    /// The smallest kept vector with room for `capacity`, unless even it
    /// is several times that: a vector taken is resident wherever it is,
    /// and a small chunk or the tail of a spilled transaction should not
    /// hold the room of a large batch.
    fn take(&self, capacity: usize) -> Vec<Event> {
        if capacity >= SMALLEST_KEPT
            && let Ok(mut kept) = self.kept.lock()
            && let Some((at, _)) = kept
                .vectors
                .iter()
                .enumerate()
                .filter(|(_, v)| (capacity..=capacity.saturating_mul(4)).contains(&v.capacity()))
                .min_by_key(|(_, v)| v.capacity())
        {
            return kept.remove(at);
        }
        Vec::with_capacity(capacity)
    }

    fn give(&self, mut events: Vec<Event>) {
        // The events go on this thread, before the lock.
        events.clear();
        let bytes = slot_bytes(&events);
        if events.capacity() < SMALLEST_KEPT || bytes > self.limit / 2 {
            return;
        }
        let Ok(mut kept) = self.kept.lock() else { return };
        while kept.bytes + bytes > self.limit || kept.vectors.len() >= KEPT_VECTORS {
            let Some((at, smallest)) = kept.vectors.iter().enumerate().min_by_key(|(_, v)| v.capacity()) else {
                break;
            };
            if smallest.capacity() >= events.capacity() {
                return;
            }
            kept.remove(at);
        }
        kept.bytes += bytes;
        kept.vectors.push(events);
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        let kept = self.kept.lock().unwrap();
        assert_eq!(kept.bytes, kept.vectors.iter().map(slot_bytes).sum::<usize>(), "the running count");
        kept.bytes
    }
}

fn slot_bytes(events: &Vec<Event>) -> usize {
    events.capacity() * size_of::<Event>()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVENT: usize = size_of::<Event>();

    #[test]
    fn a_given_vector_comes_back_empty_with_its_room() {
        let pool = Pool::new(4 << 20);
        let mut events = Vec::with_capacity(777);
        events.push(crate::event::tests::event(1, 0));
        let at = events.as_ptr();
        pool.give(events);
        assert_eq!(pool.held(), 777 * EVENT);
        let again = pool.take(770);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), at, "the kept vector, not a new one");
        assert!(again.capacity() >= 777);
        assert_eq!(pool.held(), 0);
        // Nothing kept is large enough, or small enough: new vectors.
        pool.give(again);
        assert!(pool.take(778).capacity() >= 778);
        assert!(pool.take(100).capacity() < 777);
        assert_eq!(pool.held(), 777 * EVENT);
        // The smallest that fits.
        pool.give(Vec::with_capacity(1500));
        pool.give(Vec::with_capacity(800));
        assert_eq!(pool.take(500).capacity(), 777);
        assert_eq!(pool.take(500).capacity(), 800);
        assert_eq!(pool.held(), 1500 * EVENT);
    }

    #[test]
    fn the_pool_keeps_no_more_than_its_limit_and_prefers_larger_vectors() {
        let pool = Pool::new(10_000 * EVENT);
        for _ in 0..4 {
            pool.give(Vec::with_capacity(2000));
        }
        assert_eq!(pool.held(), 8000 * EVENT);
        // Room for 2000 more, not 4000: a smaller one makes way.
        pool.give(Vec::with_capacity(4000));
        assert_eq!(pool.held(), 10_000 * EVENT);
        assert!(pool.take(4000).capacity() >= 4000);
        assert_eq!(pool.held(), 6000 * EVENT);
        pool.give(Vec::with_capacity(3000));
        assert_eq!(pool.held(), 9000 * EVENT);
        // The next 3000 takes a 2000's place; a 1000 finds nothing smaller
        // and is dropped.
        pool.give(Vec::with_capacity(3000));
        assert_eq!(pool.held(), 10_000 * EVENT);
        pool.give(Vec::with_capacity(1000));
        assert_eq!(pool.held(), 10_000 * EVENT);
        assert!(pool.take(3000).capacity() >= 3000);
        assert!(pool.take(3000).capacity() >= 3000);
        assert_eq!(pool.held(), 4000 * EVENT);
        // Over half the limit: never kept.
        pool.give(Vec::with_capacity(5100));
        assert_eq!(pool.held(), 4000 * EVENT);
    }

    #[test]
    fn small_vectors_are_not_kept_and_the_count_is_bounded() {
        let pool = Pool::new(usize::MAX / 2);
        pool.give(Vec::with_capacity(SMALLEST_KEPT - 1));
        assert_eq!(pool.held(), 0);
        assert!(pool.take(10).capacity() >= 10);
        for n in 0..KEPT_VECTORS * 2 {
            pool.give(Vec::with_capacity(SMALLEST_KEPT + n));
        }
        let kept = pool.kept.lock().unwrap();
        assert_eq!(kept.vectors.len(), KEPT_VECTORS);
        // The larger ones stayed.
        assert!(kept.vectors.iter().all(|v| v.capacity() >= SMALLEST_KEPT + KEPT_VECTORS));
    }
}
