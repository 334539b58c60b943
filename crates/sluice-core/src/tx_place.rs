//! Where a log event falls in its source transaction, as Debezium's
//! transaction metadata numbers it. The source stamps every event as it
//! reads the transaction from its start, so the numbers do not depend on
//! where a sink resumed: a sink that restarts inside a transaction still
//! writes the numbers the first run would have.

use std::sync::Arc;

use crate::event::{Event, Op};

/// Records of a transaction, counted as Debezium counts them: a primary
/// key change is two (its delete and its create). Truncates and logical
/// messages are counted apart, since a format may leave them out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxCounts {
    pub rows: u32,
    pub truncates: u32,
    pub messages: u32,
}

impl TxCounts {
    fn add(&mut self, event: &Event) {
        match event.op {
            // A schema change is no record of Debezium's transaction.
            Op::Schema => {}
            Op::Truncate => self.truncates += 1,
            Op::Message => self.messages += 1,
            _ if event.changes_key() => self.rows += 2,
            _ => self.rows += 1,
        }
    }

    /// The records a format writes: rows, and truncates and messages
    /// where it includes them.
    pub fn written(&self, truncates: bool, messages: bool) -> u32 {
        self.rows + if truncates { self.truncates } else { 0 } + if messages { self.messages } else { 0 }
    }
}

/// Each table's records in a transaction, in the order the tables first
/// appear.
pub type TxTotals = Arc<[(Arc<str>, TxCounts)]>;

/// One event's place in its transaction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TxPlace {
    /// Records of the transaction before this event's first.
    pub before: TxCounts,
    /// Records of the same table before this event's first.
    pub table_before: TxCounts,
    /// On the transaction's last event: every table's records, in the
    /// order the tables first appear.
    pub totals: Option<TxTotals>,
    /// On a PostgreSQL transaction's last event: where its commit record
    /// ends in the WAL, which Debezium's END record names.
    pub commit_end: Option<u64>,
}

/// Counts a source's transactions as it reads them.
#[derive(Debug, Default)]
pub struct TxCounter {
    tx: Option<Arc<str>>,
    total: TxCounts,
    tables: Vec<(Arc<str>, TxCounts)>,
}

impl TxCounter {
    /// The place of `event`, the next event of the stream; its `tx_end`
    /// must be final. An event outside any transaction (an empty `tx_id`,
    /// a non-transactional message) has none.
    pub fn place(&mut self, event: &Event) -> Option<TxPlace> {
        if event.tx_id.is_empty() {
            return None;
        }
        if self.tx.as_deref() != Some(&*event.tx_id) {
            self.tx = Some(event.tx_id.clone());
            self.total = TxCounts::default();
            self.tables.clear();
        }
        let index = match self.tables.iter().position(|(table, _)| *table == event.table) {
            Some(index) => index,
            None => {
                self.tables.push((event.table.clone(), TxCounts::default()));
                self.tables.len() - 1
            }
        };
        let place = TxPlace { before: self.total, table_before: self.tables[index].1, totals: None, commit_end: None };
        self.total.add(event);
        self.tables[index].1.add(event);
        let totals = event.tx_end.then(|| Arc::from(std::mem::take(&mut self.tables)));
        if event.tx_end {
            self.tx = None;
        }
        Some(TxPlace { totals, ..place })
    }

    /// Places `event` and records the place in its origin.
    pub fn stamp(&mut self, event: &mut Event) {
        let place = self.place(event);
        if let crate::schema::Origin::Postgres { tx, .. } | crate::schema::Origin::Mysql { tx, .. } = &mut event.origin
        {
            *tx = place;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::position::{Lsn, Position};
    use crate::schema::{ColumnSchema, ColumnType, TableSchema};
    use crate::value::{Row, Value};

    fn event(op: Op, table: &str, tx: &str, end: bool, key: (i64, i64)) -> Event {
        let row = |id: i64| Some(Row { columns: vec![Arc::from("id")].into(), values: vec![Value::Int(id)] });
        let schema = TableSchema {
            columns: vec![ColumnSchema {
                name: "id".into(),
                type_name: "int".into(),
                ty: ColumnType::Int32,
                nullable: false,
                default: None,
            }],
            primary_key: vec![0],
        };
        Event {
            op,
            source_id: "s".into(),
            database: "d".into(),
            table: table.into(),
            key: row(key.1),
            before: (op == Op::Update).then(|| row(key.0)).flatten(),
            after: row(key.1),
            schema_version: 1,
            position: Position::Postgres { commit_lsn: Lsn(1), seq: 0 },
            tx_id: tx.into(),
            tx_end: end,
            commit_time_us: 0,
            schema: Some(Arc::new(schema)),
            origin: crate::schema::Origin::None,
            route: None,
            shape: Default::default(),
        }
    }

    #[test]
    fn a_key_change_counts_twice_and_truncates_and_messages_apart() {
        let mut counter = TxCounter::default();
        let events = [
            event(Op::Insert, "a", "7", false, (1, 1)),
            event(Op::Update, "b", "7", false, (1, 2)),
            event(Op::Truncate, "a", "7", false, (0, 0)),
            event(Op::Update, "a", "7", true, (3, 3)),
        ];
        let places: Vec<TxPlace> = events.iter().map(|e| counter.place(e).unwrap()).collect();
        let counts = |rows, truncates| TxCounts { rows, truncates, messages: 0 };
        assert_eq!(
            places.iter().map(|p| p.before).collect::<Vec<_>>(),
            [counts(0, 0), counts(1, 0), counts(3, 0), counts(3, 1)]
        );
        assert_eq!(places[3].table_before, counts(1, 1));
        let totals = places[3].totals.as_deref().unwrap();
        assert_eq!(totals, [(Arc::from("a"), counts(2, 1)), (Arc::from("b"), counts(2, 0))]);
        assert!(places[..3].iter().all(|p| p.totals.is_none()));
        // The next transaction starts from nothing.
        let next = counter.place(&event(Op::Insert, "a", "8", true, (5, 5))).unwrap();
        assert_eq!(next.before, TxCounts::default());
        assert!(counter.place(&event(Op::Message, "p", "", true, (0, 0))).is_none());
    }
}
