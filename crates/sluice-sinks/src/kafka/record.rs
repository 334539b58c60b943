//! Encoded records as Kafka messages.

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use sluice_core::Event;
use sluice_format::Record;

use super::read_back::{PARTITIONS_HEADER, RECORD_HEADER};

/// Where a `read_back` record goes, and its marks.
pub(super) struct Placed {
    pub partition: i32,
    pub record: u32,
    pub partitions: std::sync::Arc<str>,
}

/// `n` in decimal, written at the end of `buffer`.
fn decimal(mut n: u32, buffer: &mut [u8; 10]) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buffer[at..];
        }
    }
}

/// One encoded record as a Kafka message: the format's key where it
/// defines one (Debezium), else the sink's own; Sluice's lineage headers
/// (the record's id, and the event's position as text) and the format's
/// headers.
pub(super) fn kafka_record<'a>(
    topic: &'a str,
    event: &'a Event,
    (id, position): (&'a str, &'a str),
    encoded: &'a Record,
    native_key: Option<&'a [u8]>,
    placed: Option<Placed>,
) -> BaseRecord<'a, [u8], [u8], usize> {
    // The opaque, the message's number in the producer's ledger, is set as it is sent.
    // librdkafka grows a header list past its capacity by reallocating it,
    // per message: the capacity counts every header the record will get.
    let capacity = 6 + encoded.headers.len() + if placed.is_some() { 2 } else { 0 };
    let mut headers = OwnedHeaders::new_with_capacity(capacity)
        .insert(Header { key: "sluice.event_id", value: Some(id.as_bytes()) })
        .insert(Header { key: "sluice.source", value: Some(event.source_id.as_bytes()) })
        .insert(Header { key: "sluice.db", value: Some(event.database.as_bytes()) })
        .insert(Header { key: "sluice.table", value: Some(event.table.as_bytes()) })
        .insert(Header { key: "sluice.op", value: Some(event.op.code().as_bytes()) });
    headers = headers.insert(Header { key: "sluice.position", value: Some(position.as_bytes()) });
    for (name, value) in &encoded.headers {
        headers = headers.insert(Header { key: name, value: Some(value.as_slice()) });
    }
    let mut partition = None;
    if let Some(placed) = &placed {
        // librdkafka copies a header's value as it is added, so the index
        // is written on the stack rather than allocated.
        let mut digits = [0u8; 10];
        let record = decimal(placed.record, &mut digits);
        headers = headers
            .insert(Header { key: RECORD_HEADER, value: Some(record) })
            .insert(Header { key: PARTITIONS_HEADER, value: Some(placed.partitions.as_bytes()) });
        partition = Some(placed.partition);
    }
    let mut record = BaseRecord::with_opaque_to(topic, 0).headers(headers);
    if let Some(partition) = partition {
        record = record.partition(partition);
    }
    if let Some(value) = &encoded.value {
        record = record.payload(value.as_slice());
    }
    if let Some(key) = encoded.key.as_deref().or(native_key.filter(|_| encoded.key.is_none())) {
        record = record.key(key);
    }
    record
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_writes_what_to_string_writes() {
        let mut digits = [0u8; 10];
        for n in [0, 7, 10, 99, 1_000_001, u32::MAX] {
            assert_eq!(super::decimal(n, &mut digits), n.to_string().as_bytes());
        }
    }
}
