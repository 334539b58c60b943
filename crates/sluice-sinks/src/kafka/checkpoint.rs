//! The exactly-once sink's position, kept in a compacted topic.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice_core::{Position, SinkError};

/// Creates the compacted checkpoint topic if it is missing.
pub async fn ensure_topic(base: &ClientConfig, topic: &str, timeout: Duration) -> Result<(), SinkError> {
    let admin: AdminClient<DefaultClientContext> = base
        .create()
        .map_err(|e| SinkError::permanent_from("kafka: cannot create an admin client", "check client_conf", e))?;
    let metadata = admin
        .inner()
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| SinkError::transient_from(format!("kafka: cannot read metadata for {topic}"), e))?;
    let exists = metadata.topics().iter().any(|t| t.name() == topic && t.error().is_none());
    if exists {
        return Ok(());
    }
    let brokers = metadata.brokers().len().max(1) as i32;
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(brokers.min(3))).set("cleanup.policy", "compact");
    let results = admin
        .create_topics([&new], &AdminOptions::new().operation_timeout(Some(timeout)))
        .await
        .map_err(|e| SinkError::transient_from(format!("kafka: cannot create checkpoint topic {topic}"), e))?;
    for result in results {
        if let Err((name, code)) = result
            && code != rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists
        {
            return Err(SinkError::permanent(
                format!("kafka: cannot create checkpoint topic {name}: {code}"),
                "create it yourself as a compacted topic with one partition, or grant the sink CREATE on it",
            ));
        }
    }
    Ok(())
}

/// A consumer that reads without joining a group's offsets; `create`
/// lets its first look at a topic create it, as a producer's send would.
pub fn reader(base: &ClientConfig, group: &str, isolation: &str, create: bool) -> Result<BaseConsumer, SinkError> {
    let mut config = base.clone();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "false")
        .set("allow.auto.create.topics", if create { "true" } else { "false" });
    config.create().map_err(|e| SinkError::permanent_from("kafka: cannot create a consumer", "check client_conf", e))
}

/// A partition's low and high watermarks (blocking). A topic created a
/// moment ago has no leader until the controller elects one, so the
/// errors that say so are waited out, up to `timeout`, before they count.
pub fn watermarks(consumer: &BaseConsumer, topic: &str, partition: i32, timeout: Duration) -> Result<(i64, i64), SinkError> {
    use rdkafka::types::RDKafkaErrorCode as Code;
    let started = Instant::now();
    loop {
        match consumer.fetch_watermarks(topic, partition, timeout) {
            Ok(marks) => return Ok(marks),
            Err(e)
                if started.elapsed() < timeout
                    && matches!(
                        e.rdkafka_error_code(),
                        Some(Code::NotLeaderForPartition | Code::LeaderNotAvailable | Code::UnknownTopicOrPartition)
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(SinkError::transient_from(format!("kafka: cannot read the end of {topic}"), e)),
        }
    }
}

/// Reads the latest committed position for `key` (read_committed).
pub fn read_position(
    base: &ClientConfig,
    topic: &str,
    key: &str,
    timeout: Duration,
) -> Result<Option<Position>, SinkError> {
    let consumer = reader(base, "sluice-checkpoint-reader", "read_committed", false)?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| SinkError::transient_from(format!("kafka: cannot read metadata for {topic}"), e))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut assignment = TopicPartitionList::new();
    let mut ends = Vec::new();
    for partition in &partitions {
        let (_, high) = watermarks(&consumer, topic, *partition, timeout)?;
        if high > 0 {
            assignment
                .add_partition_offset(topic, *partition, Offset::Beginning)
                .map_err(|e| SinkError::transient_from("kafka: cannot assign the checkpoint topic", e))?;
            ends.push((*partition, high));
        }
    }
    if ends.is_empty() {
        return Ok(None);
    }
    consumer
        .assign(&assignment)
        .map_err(|e| SinkError::transient_from("kafka: cannot assign the checkpoint topic", e))?;
    let started = Instant::now();
    let mut found: Option<Position> = None;
    // Read to the end of every partition. A transaction of another writer
    // that is still open holds read_committed readers back until it ends.
    loop {
        let done = ends.iter().all(|(partition, high)| {
            consumer
                .position()
                .ok()
                .and_then(|list| list.find_partition(topic, *partition).and_then(|p| p.offset().to_raw()))
                .is_some_and(|offset| offset >= *high)
        });
        if done {
            return Ok(found);
        }
        if started.elapsed() > timeout {
            return Err(SinkError::transient(format!(
                "kafka: reading checkpoint topic {topic} did not reach its end within {}s",
                timeout.as_secs()
            )));
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) if message.key() == Some(key.as_bytes()) => {
                let text = message.payload().map(String::from_utf8_lossy).unwrap_or_default();
                let position: Position = text.parse().map_err(|e| {
                    SinkError::permanent(
                        format!("kafka: checkpoint topic {topic} holds {text:?} for {key}: {e}"),
                        "delete that record (write a tombstone for the key) and reset this sink's checkpoint",
                    )
                })?;
                found = Some(found.map_or(position.clone(), |f: Position| f.max(position)));
            }
            Some(Ok(_)) | None => {}
            Some(Err(e)) => return Err(SinkError::transient_from(format!("kafka: reading {topic}"), e)),
        }
    }
}
