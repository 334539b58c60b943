//! `exactly_once: read_back`: exactly-once without transactions.
//!
//! The idempotent producer, with the gap-less guarantee and no message
//! timeout, writes each partition a prefix of what was sent to it, in
//! order. Each record goes to a partition computed here from its key (as
//! Kafka's Java client does: murmur2, positive, modulo the count), so a
//! replayed event goes where its first copy went. The first time the sink
//! meets a topic after opening, it reads the last record of each partition:
//! its `sluice.position` and `sluice.record` headers say how far that
//! partition got, and every replayed record at or below it is skipped. Each
//! record also carries the topic's partition count (`sluice.partitions`),
//! so a count that changed between runs, which would send replays
//! elsewhere, stops the sink instead of duplicating events.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice_core::{Position, SinkError};

pub const RECORD_HEADER: &str = "sluice.record";
pub const PARTITIONS_HEADER: &str = "sluice.partitions";

/// Where one record stands in the stream: its event's position sort key
/// and its index among the event's records.
pub type Mark = (String, u32);

/// What the sink knows of a topic it writes.
pub struct TopicState {
    pub partitions: i32,
    /// The count as the `sluice.partitions` header writes it.
    pub partitions_text: std::sync::Arc<str>,
    /// Per partition, the mark of its last record while replayed records
    /// may still be at or below it; `None` once the stream is past it.
    last: Vec<Option<Mark>>,
}

impl TopicState {
    /// Whether the record marked `mark`, bound for `partition`, is in the
    /// partition already. The first record past the partition's last one
    /// ends the comparisons for that partition, so the mark (an allocated
    /// sort key) is made only while a replay may still be under way.
    pub fn holds(&mut self, partition: i32, mark: impl FnOnce() -> Mark) -> bool {
        let Some(slot) = self.last.get_mut(partition as usize) else { return false };
        match slot {
            Some(last) if mark() <= *last => true,
            Some(_) => {
                *slot = None;
                false
            }
            None => false,
        }
    }
}

/// The partition Kafka's Java client picks for `key` among `partitions`.
pub fn partition_of(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as i32) % partitions.max(1)
}

/// Kafka's murmur2 (seed 0x9747b28c), as its Java client hashes keys.
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h = SEED ^ length as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// Reads the partition count of `topic` and the mark of each partition's
/// last record (blocking).
pub fn read_topic(base: &ClientConfig, topic: &str, timeout: Duration, sink: &str) -> Result<TopicState, SinkError> {
    let consumer = super::checkpoint::reader(base, "sluice-read-back", "read_uncommitted", true)?;
    let partitions = partition_count(&consumer, topic, timeout, sink)?;
    let mut assignment = TopicPartitionList::new();
    let mut pending = 0;
    let mut last = vec![None; partitions as usize];
    for partition in 0..partitions {
        let (low, high) = super::checkpoint::watermarks(&consumer, topic, partition, timeout)?;
        if high > low {
            assignment
                .add_partition_offset(topic, partition, Offset::Offset(high - 1))
                .map_err(|e| SinkError::transient_from("kafka: cannot assign a partition to read back", e))?;
            pending += 1;
        }
    }
    if pending == 0 {
        return Ok(TopicState { partitions, partitions_text: partitions.to_string().into(), last });
    }
    consumer
        .assign(&assignment)
        .map_err(|e| SinkError::transient_from("kafka: cannot assign a partition to read back", e))?;
    let started = Instant::now();
    let mut read = vec![false; partitions as usize];
    while pending > 0 {
        if started.elapsed() > timeout {
            return Err(SinkError::transient(format!(
                "kafka sink {sink:?}: reading back the last records of {topic} took over {}s",
                timeout.as_secs()
            )));
        }
        let message = match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => message,
            Some(Err(e)) => return Err(SinkError::transient_from(format!("kafka: reading back {topic}"), e)),
            None => continue,
        };
        let index = message.partition() as usize;
        if read.get(index).copied().unwrap_or(true) {
            continue;
        }
        read[index] = true;
        pending -= 1;
        let header = |name: &str| {
            message
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == name).and_then(|h| h.value))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let foreign = || {
            SinkError::permanent(
                format!(
                    "kafka sink {sink:?}: the last record of {topic} partition {index} has no Sluice read-back headers: \
                     another writer shares the topic"
                ),
                "give the sink a topic of its own, or use exactly_once: true (transactions) or false",
            )
        };
        let position: Position = header("sluice.position").and_then(|p| p.parse().ok()).ok_or_else(foreign)?;
        let record: u32 = header(RECORD_HEADER).and_then(|r| r.parse().ok()).ok_or_else(foreign)?;
        let written_with: i32 = header(PARTITIONS_HEADER).and_then(|c| c.parse().ok()).ok_or_else(foreign)?;
        if written_with != partitions {
            return Err(SinkError::permanent(
                format!(
                    "kafka sink {sink:?}: topic {topic} had {written_with} partitions when this sink last wrote it \
                     and has {partitions} now, so replayed events would land in other partitions than their first copies"
                ),
                "write to a new topic, or run once with exactly_once: false (replays may then repeat events) and back",
            ));
        }
        last[index] = Some((position.sort_key(), record));
    }
    Ok(TopicState { partitions, partitions_text: partitions.to_string().into(), last })
}

/// The partition count of `topic`, which this first look may create (by
/// the brokers' auto-creation); an error while it has none.
fn partition_count(consumer: &BaseConsumer, topic: &str, timeout: Duration, sink: &str) -> Result<i32, SinkError> {
    let started = Instant::now();
    let partitions = loop {
        let metadata = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| SinkError::transient_from(format!("kafka: cannot read metadata for {topic}"), e))?;
        let partitions = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len() as i32);
        // A topic created by that request has its partitions a moment later.
        if partitions > 0 || started.elapsed() > timeout {
            break partitions;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if partitions == 0 {
        return Err(SinkError::transient(format!(
            "kafka sink {sink:?}: topic {topic} has no partitions yet (is it created, or may the brokers create it?)"
        )));
    }
    Ok(partitions)
}

/// The topics met since the sink opened.
#[derive(Default)]
pub struct ReadBack {
    pub topics: HashMap<String, TopicState>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_match_the_java_clients() {
        // Kafka's own test vectors for Utils.murmur2.
        assert_eq!(murmur2(b"21") as i32, -973932308);
        assert_eq!(murmur2(b"foobar") as i32, -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string") as i32, -1486304829);
        assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32, -58897971);
        assert_eq!(murmur2(b"abc") as i32, 479470107);
    }

    #[test]
    fn a_partition_holds_records_up_to_its_last_one() {
        let mut state =
            TopicState { partitions: 2, partitions_text: "2".into(), last: vec![Some(("b".into(), 1)), None] };
        assert!(state.holds(0, || ("a".into(), 5)));
        assert!(state.holds(0, || ("b".into(), 1)));
        assert!(!state.holds(0, || ("b".into(), 2)));
        assert!(!state.holds(0, || ("a".into(), 0)), "past the last record, nothing is skipped");
        assert!(!state.holds(1, || ("a".into(), 0)));
    }
}
