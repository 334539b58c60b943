//! What the network sinks share in turning events into their format's
//! records.

use std::borrow::Cow;

use sluice_core::{Event, SinkError};
use sluice_format::{Encoder, Record, RecordKind};

/// Appends `event`'s records to `out`; an event the format cannot
/// represent is rejected, so it goes to the dead letter queue with the
/// reason instead of being changed.
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
pub(crate) fn record_id<'a>(event_id: &'a str, records: &[Record], index: usize) -> Cow<'a, str> {
    let changes_before = records[..index].iter().filter(|r| r.kind != RecordKind::Transaction).count();
    match records[index].kind {
        RecordKind::Transaction if changes_before == 0 => Cow::Owned(format!("{event_id}/begin")),
        RecordKind::Transaction => Cow::Owned(format!("{event_id}/end")),
        _ if changes_before == 0 => Cow::Borrowed(event_id),
        _ => Cow::Owned(format!("{event_id}/{changes_before}")),
    }
}
