//! Turning events into a sink's format: once per batch for every sink that
//! writes the same events in the same format, and ids for each record.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use sluice_core::{Event, EventId, SharedValue, SharedWork, SinkError};
use sluice_format::{Carrier, Encoded, Encoder, FormatConfig, Record, RecordKind};
use tokio::sync::OnceCell;

/// A sink's encoder, which shares its work on a batch with the other sinks
/// writing the batch in the same format.
pub(crate) struct SharedEncoder {
    encoder: Encoder,
    /// Frames records as Avro with registry ids, for `encoding: avro`.
    #[cfg(feature = "avro")]
    avro: Option<crate::avro::AvroWriter>,
    /// The last record [`SharedEncoder::finish`] framed; its buffers are
    /// reused, so framing costs no allocation per record.
    #[cfg(feature = "avro")]
    framed: Record,
    key: u64,
    /// Names the sink in rejections: `file sink "out"`.
    sink: String,
}

/// The records of a chunk of events, this sink's or shared.
pub(crate) enum Encoding {
    Own(Encoded),
    Shared(Arc<OnceCell<SharedValue>>),
}

impl Encoding {
    fn encoded(&self) -> Option<&Encoded> {
        match self {
            Encoding::Own(encoded) => Some(encoded),
            Encoding::Shared(cell) => cell.get().and_then(|value| value.downcast_ref::<Encoded>()),
        }
    }

    /// The records of the chunk's event at `index`; an event the format
    /// cannot represent is rejected, so it goes to the dead letter queue
    /// with the reason instead of being changed.
    pub(crate) fn records<'a>(
        &'a self,
        sink: &SharedEncoder,
        index: usize,
        event: &Event,
    ) -> Result<&'a [Record], SinkError> {
        let missing =
            || SinkError::transient(format!("{}: an encoded batch is missing event {}", sink.sink, event.position));
        match self.encoded().and_then(|encoded| encoded.event(index)).ok_or_else(missing)? {
            Ok(records) => Ok(records),
            Err(e) => Err(sink.rejected(event, e)),
        }
    }

    /// The id of the chunk's event at `index`, hashed once by the format
    /// where it carries the id, else here.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) fn id(&self, index: usize, event: &Event) -> EventId {
        self.encoded().and_then(|encoded| encoded.id(index)).unwrap_or_else(|| event.id())
    }
}

impl SharedEncoder {
    /// The error of an event the format cannot encode, naming the sink.
    pub(crate) fn rejected(&self, event: &Event, problem: impl std::fmt::Display) -> SinkError {
        SinkError::Rejected { detail: format!("{}: {problem}", self.sink), position: event.position.clone() }
    }

    pub(crate) fn new(config: &FormatConfig, carrier: Carrier, sink: String) -> Self {
        let encoder = Encoder::new(config, carrier);
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        encoder.identity().hash(&mut hasher);
        #[cfg(feature = "avro")]
        let avro = crate::avro::AvroWriter::new(config, sink.clone());
        Self {
            key: hasher.finish(),
            encoder,
            #[cfg(feature = "avro")]
            avro,
            #[cfg(feature = "avro")]
            framed: Record {
                kind: sluice_format::RecordKind::Change,
                key: None,
                value: None,
                headers: Vec::new(),
                key_schema: None,
                value_schema: None,
            },
            sink,
        }
    }

    /// Checks that the format's registry answers, where it has one.
    #[cfg_attr(not(any(feature = "kafka", feature = "nats", feature = "redis", feature = "http")), allow(dead_code))]
    pub(crate) async fn probe(&mut self) -> Result<(), SinkError> {
        #[cfg(feature = "avro")]
        if let Some(avro) = &mut self.avro {
            return avro.probe().await;
        }
        Ok(())
    }

    /// `record` as the encoding writes it to `destination`: `None` where
    /// the encoder's record is final (every encoding but Avro, whose
    /// datums carry registry ids that depend on the destination).
    /// `keys: false` leaves out the key of a sink that does not write it.
    #[cfg_attr(not(any(feature = "kafka", feature = "nats")), allow(dead_code))]
    pub(crate) async fn finish(
        &mut self,
        record: &Record,
        destination: &str,
        event: &Event,
        keys: bool,
    ) -> Result<Option<&Record>, SinkError> {
        #[cfg(feature = "avro")]
        if let Some(avro) = &mut self.avro {
            avro.encode_into(record, destination, event, keys, &mut self.framed).await?;
            return Ok(Some(&self.framed));
        }
        let _ = (record, destination, event, keys);
        Ok(None)
    }

    /// [`SharedEncoder::finish`] of each of an event's records.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) async fn finish_all(
        &mut self,
        records: &[Record],
        destination: &str,
        event: &Event,
    ) -> Result<Option<Vec<Record>>, SinkError> {
        let mut finished = Vec::with_capacity(records.len());
        for record in records {
            match self.finish(record, destination, event, true).await? {
                Some(record) => finished.push(record.clone()),
                None => return Ok(None),
            }
        }
        Ok(Some(finished))
    }

    /// The encoder itself, for one event at a time.
    #[cfg_attr(not(any(feature = "kafka", feature = "redis", feature = "nats", feature = "http")), allow(dead_code))]
    pub(crate) fn encoder(&mut self) -> &mut Encoder {
        &mut self.encoder
    }

    pub(crate) fn is_native(&self) -> bool {
        self.encoder.is_native()
    }

    #[cfg_attr(not(any(feature = "kafka", feature = "redis", feature = "nats", feature = "http")), allow(dead_code))]
    pub(crate) fn defines_keys(&self) -> bool {
        self.encoder.defines_keys()
    }

    #[cfg_attr(not(any(feature = "kafka", feature = "redis", feature = "nats", feature = "http")), allow(dead_code))]
    pub(crate) fn transaction_topic(&self, event: &Event) -> Option<String> {
        self.encoder.transaction_topic(event)
    }

    /// The topic Debezium would write `record` to (see [`Encoder::topic`]).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn topic(&self, event: &Event, record: &Record) -> Option<String> {
        self.encoder.topic(event, record)
    }

    /// The records of every event of `chunk`. Where the write is shared
    /// (`shared`, from [`sluice_core::EventChunks::shared`]), the first
    /// sink of this format to get here encodes, and the others take its
    /// records.
    pub(crate) async fn chunk(&mut self, shared: Option<&(Arc<SharedWork>, u64)>, chunk: &[Event]) -> Encoding {
        let Some((work, offset)) = shared else { return Encoding::Own(self.encoder.encode_all(chunk)) };
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        // A batch may come in several chunks from the same offset: the
        // first event's position tells them apart.
        (self.key, *offset, chunk.len(), chunk.first().map(|e| &e.position)).hash(&mut hasher);
        let cell = work.cell(hasher.finish());
        let encoder = &mut self.encoder;
        cell.get_or_init(|| async { Arc::new(encoder.encode_all(chunk)) as SharedValue }).await;
        // A different format that hashed alike would have other records:
        // check the identity rather than trust the hash.
        let same =
            cell.get().and_then(|v| v.downcast_ref::<Encoded>()).is_some_and(|e| e.identity == self.encoder.identity());
        if same { Encoding::Shared(cell) } else { Encoding::Own(self.encoder.encode_all(chunk)) }
    }
}

/// Appends `event`'s records to `out`, for a sink encoding one event at a
/// time (a dead letter sent again); a format error rejects the event.
#[cfg_attr(not(any(feature = "kafka", feature = "redis", feature = "nats", feature = "http")), allow(dead_code))]
pub(crate) fn encode(
    encoder: &mut Encoder,
    sink: &str,
    event: &Event,
    id: &str,
    out: &mut Vec<Record>,
) -> Result<(), SinkError> {
    encoder
        .encode_with_id(event, id, out)
        .map_err(|e| SinkError::Rejected { detail: format!("{sink}: {e}"), position: event.position.clone() })
}

/// The id of `records[index]`, one of an event's records. One event may
/// make several (Debezium's delete and create of a key change, and the
/// BEGIN and END of its transaction); each needs an id of its own, or a
/// consumer dropping repeats by id would drop the later ones. The event's
/// first change keeps the event id; a BEGIN or END is `<id>/begin` or
/// `<id>/end`.
#[cfg_attr(not(any(feature = "kafka", feature = "redis", feature = "nats", feature = "http")), allow(dead_code))]
pub(crate) fn record_id<'a>(event_id: &'a str, records: &[Record], index: usize) -> Cow<'a, str> {
    let changes_before = records[..index].iter().filter(|r| r.kind != RecordKind::Transaction).count();
    match records[index].kind {
        RecordKind::Transaction if changes_before == 0 => Cow::Owned(format!("{event_id}/begin")),
        RecordKind::Transaction => Cow::Owned(format!("{event_id}/end")),
        _ if changes_before == 0 => Cow::Borrowed(event_id),
        _ => Cow::Owned(format!("{event_id}/{changes_before}")),
    }
}
