//! An event's position text and id, printed and hashed once for a sink
//! that writes both.

use std::sync::Arc;

use sha1::Digest as _;
use uuid::Uuid;

use super::{Event, EventId, ID_LEN};
use crate::position::Position;

/// An event's position text and id text, printed into buffers kept from
/// one event to the next. A sink that writes both (the native envelope,
/// Kafka's headers) prints the position once and hashes the id from that
/// print, where [`Event::id`] would print it again: printing a snapshot
/// row's position was a tenth of a file sink's time.
///
/// Every row of a snapshot's table starts its position with the same
/// text (the table in hex), so that start is printed, and taken into the
/// id's hash, once per table rather than once per row.
pub struct Marks {
    position: String,
    id: EventId,
    id_text: [u8; ID_LEN],
    head: Option<Head>,
}

/// What the positions of one snapshot table's rows share.
struct Head {
    source_id: Arc<str>,
    table: Arc<str>,
    /// The position text up to the row's key.
    text: String,
    /// The id's hasher after the source and `text`.
    hasher: sha1::Sha1,
}

impl Head {
    fn new(source_id: &Arc<str>, table: &Arc<str>) -> Head {
        let mut text = String::new();
        Position::write_snapshot_head(table, &mut |piece| text.push_str(piece));
        let mut hasher = EventId::hasher(source_id);
        hasher.update(text.as_bytes());
        Head { source_id: source_id.clone(), table: table.clone(), text, hasher }
    }
}

impl Default for Marks {
    fn default() -> Self {
        Marks { position: String::new(), id: EventId(Uuid::nil()), id_text: [0; ID_LEN], head: None }
    }
}

impl Marks {
    /// `event`'s id text and position text.
    pub fn of(&mut self, event: &Event) -> (&str, &str) {
        self.position.clear();
        self.id = match &event.position {
            Position::Snapshot(pos) => {
                let head = match &mut self.head {
                    Some(head) if head.table == pos.table && head.source_id == event.source_id => head,
                    slot => slot.insert(Head::new(&event.source_id, &pos.table)),
                };
                self.position.push_str(&head.text);
                pos.write_tail(&mut |piece| self.position.push_str(piece));
                let mut hasher = head.hasher.clone();
                hasher.update(&self.position.as_bytes()[head.text.len()..]);
                EventId::of_hasher(hasher)
            }
            position => {
                position.write_text(&mut |piece| self.position.push_str(piece));
                EventId::of_text(&event.source_id, &self.position)
            }
        };
        (self.id.write(&mut self.id_text), &self.position)
    }

    /// The id [`Marks::of`] last gave.
    pub fn id(&self) -> EventId {
        self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::tests::event;
    use crate::position::SnapshotPos;

    fn snapshot_row(source_id: &str, table: &str, key: &[u8]) -> Event {
        let mut row = event(0, 0);
        row.source_id = source_id.into();
        row.position = Position::Snapshot(SnapshotPos {
            table: table.into(),
            key: key.into(),
            stream_from: "my:bin.000001:4:0".into(),
        });
        row
    }

    #[test]
    fn snapshot_rows_get_the_ids_and_texts_their_positions_give_whatever_the_order_of_tables() {
        let long_table = format!("schema.{}", "t".repeat(70));
        let long_key = vec![0xAB; 80];
        let rows = [
            snapshot_row("src", "shop.orders", &[1]),
            snapshot_row("src", "shop.orders", &[2, 0]),
            snapshot_row("src", &long_table, &long_key),
            snapshot_row("src", "shop.orders", &[3]),
            // The same table from another source hashes another start.
            snapshot_row("other", "shop.orders", &[3]),
            snapshot_row("a-source-id-long-enough-to-fill-a-hash-block-on-its-own", &long_table, &[]),
        ];
        let mut later = snapshot_row("src", "shop.orders", &[3]);
        later.position = later.position.in_generation(2);
        let mut marks = Marks::default();
        for row in rows.iter().chain([&later, &event(5, 2), &rows[0]]) {
            let expected = EventId::new(&row.source_id, &row.position);
            let (id, text) = marks.of(row);
            assert_eq!((id, text), (expected.to_string().as_str(), row.position.to_string().as_str()));
            assert_eq!(marks.id(), expected, "{}", row.position);
        }
    }
}
