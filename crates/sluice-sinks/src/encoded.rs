//! What the network sinks share in turning events into their format's
//! records.

use std::borrow::Cow;

use sluice_core::{Event, SinkError};
use sluice_format::{Encoder, Record};

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

/// The id of an event's record at `index`. One event may make several
/// records (Debezium's delete and create of a key change); each needs an
/// id of its own, or a consumer dropping repeats by id would drop the
/// later ones.
pub(crate) fn record_id(event_id: &str, index: usize) -> Cow<'_, str> {
    if index == 0 { Cow::Borrowed(event_id) } else { Cow::Owned(format!("{event_id}/{index}")) }
}
