//! Turns pgoutput messages into Sluice events.
//!
//! Positions are `(commit LSN, sequence in the transaction)`: Begin carries
//! the transaction's final (commit) LSN, so events stream out before the
//! commit arrives and a large transaction never has to sit in memory here.
//! The last event of a transaction is held back one step so that `tx_end`
//! can be set when Commit arrives.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use sluice_config::glob_match;
use sluice_core::{Columns, Event, Lsn, Op, Origin, Position, Row, TableSchema, Value};

use crate::catalog::RelationMeta;
use crate::pgoutput::{
    Datum, HEARTBEAT_PREFIX, Message, OldTuple, PG_EPOCH_OFFSET_US, Relation, SIGNAL_PREFIX, Tuple, WATERMARK_PREFIX,
};
use crate::types::{PgType, builtin, bytes_value, decode_text, fingerprint, fingerprint_as, key_index};

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("change for relation {0} arrived before its Relation message")]
    UnknownRelation(u32),
    #[error("a change arrived outside a transaction")]
    OutsideTransaction,
    #[error("relation {table} has {expected} columns but a row carries {actual}")]
    ColumnCount { table: String, expected: usize, actual: usize },
    #[error(transparent)]
    History(sluice_core::SourceError),
}

pub(crate) struct RelationInfo {
    table: Arc<str>,
    columns: Columns,
    types: Vec<PgType>,
    key_index: Vec<usize>,
    key_columns: Columns,
    fingerprint: u32,
    included: bool,
    pub(crate) schema: Arc<TableSchema>,
}

struct Transaction {
    commit_lsn: Lsn,
    commit_time_us: i64,
    xid: Arc<str>,
    seq: u32,
}

pub struct Decoder {
    source_id: Arc<str>,
    pub(crate) database: Arc<str>,
    patterns: Vec<String>,
    emit_messages: bool,
    pub(crate) relations: HashMap<u32, RelationInfo>,
    /// Matched tables left out of capture (`keyless_tables: skip`).
    excluded: Vec<String>,
    metas: HashMap<u32, RelationMeta>,
    types: HashMap<u32, PgType>,
    tx: Option<Transaction>,
    pub(crate) held: Option<Event>,
    /// Places each event in its transaction for Debezium's metadata.
    counter: sluice_core::TxCounter,
    /// The WAL position of the message being applied.
    message_lsn: u64,
    /// The commit LSN of the last transaction the stream finished.
    last_commit_lsn: Option<u64>,
    /// Column lists over the log, for schema-change events; none without
    /// a state dir.
    pub(crate) history: Option<crate::schema_change::ColumnHistory>,
}

impl Decoder {
    pub fn new(source_id: &str, database: &str, patterns: Vec<String>, emit_messages: bool) -> Self {
        Self {
            source_id: source_id.into(),
            database: database.into(),
            patterns,
            emit_messages,
            relations: HashMap::new(),
            excluded: Vec::new(),
            metas: HashMap::new(),
            types: HashMap::new(),
            tx: None,
            held: None,
            counter: Default::default(),
            message_lsn: 0,
            last_commit_lsn: None,
            history: None,
        }
    }

    /// Emits schema-change events, keeping the column lists in `history`.
    pub fn keep_history(&mut self, history: crate::schema_change::ColumnHistory) {
        self.history = Some(history);
    }

    /// The WAL position of the next message, for the events it makes.
    pub fn at(&mut self, lsn: u64) {
        self.message_lsn = lsn;
    }

    /// Whether a transaction is open (Begin seen, Commit not yet).
    pub fn in_transaction(&self) -> bool {
        self.tx.is_some()
    }

    /// Type OIDs of `relation` that are neither built in nor known yet.
    pub fn unknown_types(&self, relation: &Relation) -> Vec<u32> {
        let mut oids: Vec<u32> = relation
            .columns
            .iter()
            .map(|c| c.type_oid)
            .filter(|oid| builtin(*oid).is_none() && !self.types.contains_key(oid))
            .collect();
        oids.sort_unstable();
        oids.dedup();
        oids
    }

    pub fn add_type(&mut self, oid: u32, ty: PgType) {
        self.types.insert(oid, ty);
    }

    /// Leaves these `schema.table` names out even where patterns match.
    pub fn exclude(&mut self, tables: Vec<String>) {
        self.excluded = tables;
    }

    /// What the catalog says of relation `oid`, for its next Relation
    /// message: its partition root and the columns that name its rows.
    pub fn set_meta(&mut self, oid: u32, meta: RelationMeta) {
        self.metas.insert(oid, meta);
    }

    /// Applies one message; finished events go to `out`.
    pub fn apply(&mut self, message: Message, out: &mut Vec<Event>) -> Result<(), DecodeError> {
        match message {
            Message::Begin { final_lsn, commit_time_pg_us, xid } => {
                self.tx = Some(Transaction {
                    commit_lsn: Lsn(final_lsn),
                    commit_time_us: commit_time_pg_us.saturating_add(PG_EPOCH_OFFSET_US),
                    xid: xid.to_string().into(),
                    seq: 0,
                });
            }
            Message::Commit { end_lsn, .. } => {
                // Debezium's `lastCommitLsn`: where the commit record ends.
                self.last_commit_lsn = Some(end_lsn);
                if let Some(mut last) = self.held.take() {
                    last.tx_end = true;
                    self.push(last, out);
                    if let Some(Event { origin: Origin::Postgres { tx: Some(place), .. }, .. }) = out.last_mut() {
                        place.commit_end = Some(end_lsn);
                    }
                }
                self.tx = None;
            }
            Message::Origin | Message::Type { .. } => {}
            Message::Relation(relation) => self.add_relation(relation, out)?,
            Message::Insert { relation, new } => {
                let info = self.relation(relation)?;
                if info.included {
                    let after = row(info, &new)?;
                    let key = key_of(info, &new)?;
                    self.emit(Op::Insert, relation, key, None, Some(after), out)?;
                }
            }
            Message::Update { relation, old, new } => {
                let info = self.relation(relation)?;
                if info.included {
                    let mut after = row(info, &new)?;
                    let before = old.as_ref().map(|old| old_row(info, old)).transpose()?;
                    // REPLICA IDENTITY FULL sends the old row whole, so an
                    // unchanged TOAST value is known: it is the old one.
                    if let (Some(OldTuple::Full(_)), Some(before)) = (&old, &before) {
                        for (value, old_value) in after.values.iter_mut().zip(&before.values) {
                            if matches!(value, Value::Unchanged) {
                                *value = old_value.clone();
                            }
                        }
                    }
                    let key = key_of(info, &new)?;
                    self.emit(Op::Update, relation, key, before, Some(after), out)?;
                }
            }
            Message::Delete { relation, old } => {
                let info = self.relation(relation)?;
                if info.included {
                    let tuple = match &old {
                        OldTuple::Key(t) | OldTuple::Full(t) => t,
                    };
                    let before = old_row(info, &old)?;
                    let key = key_of(info, tuple)?;
                    self.emit(Op::Delete, relation, key, Some(before), None, out)?;
                }
            }
            Message::Truncate { relations } => {
                for relation in relations {
                    if self.relation(relation)?.included {
                        self.emit(Op::Truncate, relation, None, None, None, out)?;
                    }
                }
            }
            Message::Message { transactional, lsn, prefix, content } => {
                let internal = prefix == SIGNAL_PREFIX || prefix == WATERMARK_PREFIX;
                if (self.emit_messages || internal) && prefix != HEARTBEAT_PREFIX {
                    self.message(transactional, lsn, prefix, content, out)?;
                }
            }
        }
        Ok(())
    }

    fn add_relation(&mut self, relation: Relation, out: &mut Vec<Event>) -> Result<(), DecodeError> {
        let own = format!("{}.{}", relation.namespace, relation.name);
        let meta = self.metas.get(&relation.oid);
        // A partition's changes go by its root's name, whether the
        // publication sends them through the root or not.
        let root = meta.and_then(|m| m.root.as_ref());
        let table = root.map_or_else(|| own.clone(), |(schema, name)| format!("{schema}.{name}"));
        let included = self.patterns.iter().any(|p| glob_match(p, &table) || glob_match(p, &own))
            && !self.excluded.iter().any(|t| *t == table || *t == own);
        let types: Vec<PgType> = relation
            .columns
            .iter()
            .map(|c| {
                builtin(c.type_oid)
                    .or_else(|| self.types.get(&c.type_oid).cloned())
                    .unwrap_or(PgType::Scalar(crate::types::Kind::Text))
            })
            .collect();
        let columns: Columns = relation.columns.iter().map(|c| Arc::from(c.name.as_str())).collect();
        let key_index = key_index(&relation, meta.and_then(|m| m.key.as_deref()));
        let key_columns: Columns = key_index.iter().map(|i| columns[*i].clone()).collect();
        let (catalog, primary) = meta.map(|m| (m.columns.as_slice(), m.primary.as_slice())).unwrap_or_default();
        let schema = Arc::new(crate::schema::table_schema(&relation, &types, catalog, primary));
        let info = RelationInfo {
            schema,
            fingerprint: match root {
                Some((schema, name)) => fingerprint_as(schema, name, &relation),
                None => fingerprint(&relation),
            },
            table: table.into(),
            columns,
            types,
            key_index,
            key_columns,
            included,
        };
        self.relations.insert(relation.oid, info);
        if included { self.schema_change(relation.oid, &own, out) } else { Ok(()) }
    }

    fn relation(&self, oid: u32) -> Result<&RelationInfo, DecodeError> {
        self.relations.get(&oid).ok_or(DecodeError::UnknownRelation(oid))
    }

    /// The position the next event of the open transaction gets.
    pub(crate) fn peek_position(&self) -> Option<Position> {
        self.tx.as_ref().map(|tx| Position::Postgres { commit_lsn: tx.commit_lsn, seq: tx.seq })
    }

    fn next_position(&mut self) -> Result<(Position, Arc<str>, i64), DecodeError> {
        let tx = self.tx.as_mut().ok_or(DecodeError::OutsideTransaction)?;
        let position = Position::Postgres { commit_lsn: tx.commit_lsn, seq: tx.seq };
        tx.seq = tx.seq.saturating_add(1);
        Ok((position, tx.xid.clone(), tx.commit_time_us))
    }

    pub(crate) fn emit(
        &mut self,
        op: Op,
        relation: u32,
        key: Option<Row>,
        before: Option<Row>,
        after: Option<Row>,
        out: &mut Vec<Event>,
    ) -> Result<(), DecodeError> {
        let (position, tx_id, commit_time_us) = self.next_position()?;
        let info = self.relation(relation)?;
        let event = Event {
            op,
            source_id: self.source_id.clone(),
            database: self.database.clone(),
            table: info.table.clone(),
            key,
            before,
            after,
            schema_version: info.fingerprint,
            position,
            tx_id,
            tx_end: false,
            commit_time_us,
            schema: Some(info.schema.clone()),
            origin: Origin::Postgres { lsn: self.message_lsn, last_commit_lsn: self.last_commit_lsn, tx: None },
            route: None,
            shape: Default::default(),
        };
        if let Some(previous) = self.held.replace(event) {
            self.push(previous, out);
        }
        Ok(())
    }

    /// Hands on an event whose `tx_end` is final, placed in its transaction.
    fn push(&mut self, mut event: Event, out: &mut Vec<Event>) {
        self.counter.stamp(&mut event);
        out.push(event);
    }

    fn message(
        &mut self,
        transactional: bool,
        lsn: u64,
        prefix: String,
        content: Bytes,
        out: &mut Vec<Event>,
    ) -> Result<(), DecodeError> {
        let columns: Columns = ["prefix", "content", "transactional"].iter().map(|c| Arc::from(*c)).collect();
        let after = Row {
            columns,
            values: vec![Value::Text(prefix.clone().into()), bytes_value(&content), Value::Bool(transactional)],
        };
        let (position, tx_id, commit_time_us, tx_end) = if transactional {
            let (position, tx_id, time) = self.next_position()?;
            (position, tx_id, time, false)
        } else {
            // Sent at once, outside any transaction, in log order.
            (Position::Postgres { commit_lsn: Lsn(lsn), seq: 0 }, Arc::from(""), sluice_core::time::now_us(), true)
        };
        let event = Event {
            op: Op::Message,
            source_id: self.source_id.clone(),
            database: self.database.clone(),
            table: prefix.into(),
            key: None,
            before: None,
            after: Some(after),
            schema_version: 0,
            position,
            tx_id,
            tx_end,
            commit_time_us,
            schema: None,
            origin: Origin::Postgres { lsn, last_commit_lsn: self.last_commit_lsn, tx: None },
            route: None,
            shape: Default::default(),
        };
        if tx_end {
            self.push(event, out);
        } else if let Some(previous) = self.held.replace(event) {
            self.push(previous, out);
        }
        Ok(())
    }
}

fn datum_value(ty: &PgType, datum: &Datum) -> Value {
    match datum {
        Datum::Null => Value::Null,
        Datum::Unchanged => Value::Unchanged,
        Datum::Text(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => decode_text(ty, text),
            Err(_) => Value::Bytes(bytes.to_vec()),
        },
        Datum::Binary(bytes) => Value::Bytes(bytes.to_vec()),
    }
}

fn check_width(info: &RelationInfo, tuple: &Tuple) -> Result<(), DecodeError> {
    if tuple.0.len() != info.columns.len() {
        return Err(DecodeError::ColumnCount {
            table: info.table.to_string(),
            expected: info.columns.len(),
            actual: tuple.0.len(),
        });
    }
    Ok(())
}

fn row(info: &RelationInfo, tuple: &Tuple) -> Result<Row, DecodeError> {
    check_width(info, tuple)?;
    let values = tuple.0.iter().zip(&info.types).map(|(d, t)| datum_value(t, d)).collect();
    Ok(Row { columns: info.columns.clone(), values })
}

/// The old image: the whole row with REPLICA IDENTITY FULL, otherwise
/// only the key columns (the server sends nothing else, and padding the
/// rest with nulls would be a lie).
fn old_row(info: &RelationInfo, old: &OldTuple) -> Result<Row, DecodeError> {
    match old {
        OldTuple::Full(tuple) => row(info, tuple),
        OldTuple::Key(tuple) => key_row(info, tuple),
    }
}

fn key_row(info: &RelationInfo, tuple: &Tuple) -> Result<Row, DecodeError> {
    check_width(info, tuple)?;
    let values = info.key_index.iter().map(|i| datum_value(&info.types[*i], &tuple.0[*i])).collect();
    Ok(Row { columns: info.key_columns.clone(), values })
}

fn key_of(info: &RelationInfo, tuple: &Tuple) -> Result<Option<Row>, DecodeError> {
    if info.key_index.is_empty() {
        return Ok(None);
    }
    key_row(info, tuple).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgoutput::Column;

    fn relation() -> Relation {
        Relation {
            oid: 1,
            namespace: "public".into(),
            name: "orders".into(),
            replica_identity: b'd',
            columns: vec![
                Column { key: true, name: "id".into(), type_oid: 23, type_modifier: -1 },
                Column { key: false, name: "note".into(), type_oid: 25, type_modifier: -1 },
            ],
        }
    }

    fn text(s: &'static str) -> Datum {
        Datum::Text(Bytes::from_static(s.as_bytes()))
    }

    #[test]
    fn a_transaction_becomes_events_with_positions_and_tx_end() {
        let mut decoder = Decoder::new("pg", "shop", vec!["public.*".into()], true);
        let mut out = Vec::new();
        decoder.apply(Message::Relation(relation()), &mut out).unwrap();
        decoder.apply(Message::Begin { final_lsn: 0x100, commit_time_pg_us: 0, xid: 7 }, &mut out).unwrap();
        decoder.apply(Message::Insert { relation: 1, new: Tuple(vec![text("1"), text("a")]) }, &mut out).unwrap();
        decoder
            .apply(
                Message::Update {
                    relation: 1,
                    old: Some(OldTuple::Key(Tuple(vec![text("1"), Datum::Null]))),
                    new: Tuple(vec![text("2"), Datum::Unchanged]),
                },
                &mut out,
            )
            .unwrap();
        assert_eq!(out.len(), 1, "the last event waits for the commit");
        decoder.apply(Message::Commit { commit_lsn: 0x100, end_lsn: 0x108 }, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].position, Position::Postgres { commit_lsn: Lsn(0x100), seq: 0 });
        assert!(!out[0].tx_end && out[1].tx_end);
        assert_eq!(out[1].after.as_ref().unwrap().values[1], Value::Unchanged);
        let before = out[1].before.as_ref().unwrap();
        assert_eq!(before.columns.len(), 1, "a key-only old image holds only the key");
        assert_eq!(out[1].key.as_ref().unwrap().values, vec![Value::Int(2)]);
        assert_eq!(&*out[0].tx_id, "7");
        assert_eq!(out[0].commit_time_us, PG_EPOCH_OFFSET_US);
    }

    #[test]
    fn under_replica_identity_full_the_key_is_the_primary_key_and_toast_comes_from_the_old_row() {
        let mut full = relation();
        full.replica_identity = b'f';
        for column in &mut full.columns {
            column.key = true;
        }
        let mut decoder = Decoder::new("pg", "shop", vec!["public.*".into()], true);
        decoder.set_meta(1, RelationMeta { root: None, key: Some(vec!["id".into()]), ..Default::default() });
        let mut out = Vec::new();
        decoder.apply(Message::Relation(full), &mut out).unwrap();
        decoder.apply(Message::Begin { final_lsn: 0x100, commit_time_pg_us: 0, xid: 7 }, &mut out).unwrap();
        let update = Message::Update {
            relation: 1,
            old: Some(OldTuple::Full(Tuple(vec![text("1"), text("long")]))),
            new: Tuple(vec![text("1"), Datum::Unchanged]),
        };
        decoder.apply(update, &mut out).unwrap();
        decoder.apply(Message::Commit { commit_lsn: 0x100, end_lsn: 0x108 }, &mut out).unwrap();
        let key = out[0].key.as_ref().unwrap();
        assert_eq!(&*key.columns, [Arc::from("id")]);
        assert_eq!(key.values, vec![Value::Int(1)]);
        assert_eq!(out[0].after.as_ref().unwrap().values[1], Value::Text("long".into()));
    }

    #[test]
    fn a_partition_goes_by_its_roots_name_even_when_only_the_root_matches() {
        let mut partition = relation();
        partition.name = "orders_2024".into();
        let mut decoder = Decoder::new("pg", "shop", vec!["public.orders".into()], true);
        decoder.set_meta(
            1,
            RelationMeta {
                root: Some(("public".into(), "orders".into())),
                key: Some(vec!["id".into()]),
                ..Default::default()
            },
        );
        let mut out = Vec::new();
        decoder.apply(Message::Relation(partition), &mut out).unwrap();
        decoder.apply(Message::Begin { final_lsn: 1, commit_time_pg_us: 0, xid: 1 }, &mut out).unwrap();
        decoder.apply(Message::Insert { relation: 1, new: Tuple(vec![text("1"), text("a")]) }, &mut out).unwrap();
        decoder.apply(Message::Commit { commit_lsn: 1, end_lsn: 2 }, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(&*out[0].table, "public.orders");
        // The same version as the root's own rows (and its snapshot), so
        // rows of several partitions do not read as a schema change.
        assert_eq!(out[0].schema_version, fingerprint(&relation()));
    }

    #[test]
    fn tables_outside_the_patterns_and_heartbeats_are_skipped() {
        let mut decoder = Decoder::new("pg", "shop", vec!["sales.*".into()], true);
        let mut out = Vec::new();
        decoder.apply(Message::Relation(relation()), &mut out).unwrap();
        decoder.apply(Message::Begin { final_lsn: 1, commit_time_pg_us: 0, xid: 1 }, &mut out).unwrap();
        decoder.apply(Message::Insert { relation: 1, new: Tuple(vec![text("1"), text("a")]) }, &mut out).unwrap();
        decoder.apply(Message::Commit { commit_lsn: 1, end_lsn: 2 }, &mut out).unwrap();
        let heartbeat =
            Message::Message { transactional: false, lsn: 5, prefix: HEARTBEAT_PREFIX.into(), content: Bytes::new() };
        decoder.apply(heartbeat, &mut out).unwrap();
        assert!(out.is_empty());
        let outbox = Message::Message {
            transactional: false,
            lsn: 9,
            prefix: "outbox".into(),
            content: Bytes::from_static(b"{}"),
        };
        decoder.apply(outbox, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].op, Op::Message);
        assert!(out[0].tx_end);
    }

    #[test]
    fn a_change_for_an_unknown_relation_is_an_error() {
        let mut decoder = Decoder::new("pg", "shop", vec!["*.*".into()], true);
        let mut out = Vec::new();
        decoder.apply(Message::Begin { final_lsn: 1, commit_time_pg_us: 0, xid: 1 }, &mut out).unwrap();
        let err = decoder.apply(Message::Insert { relation: 9, new: Tuple(vec![]) }, &mut out).unwrap_err();
        assert!(matches!(err, DecodeError::UnknownRelation(9)));
    }

    #[test]
    fn fingerprints_follow_the_schema() {
        let a = fingerprint(&relation());
        let mut changed = relation();
        changed.columns[1].type_oid = 1043;
        assert_eq!(a, fingerprint(&relation()));
        assert_ne!(a, fingerprint(&changed));
    }
}
