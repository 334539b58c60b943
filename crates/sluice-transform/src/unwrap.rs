//! `unwrap`: the row alone in place of the change envelope, with
//! Debezium's `ExtractNewRecordState` semantics.
//!
//! The new row (the old one for a rewritten delete) becomes `after`, with
//! the fields `add_fields` names appended as columns of the row and of its
//! schema, so every format and sink sees them as columns. The event's
//! shape says the row is the record: formats write it in place of their
//! envelope. A field is added only where Debezium's `source` block has it
//! for the event's connector (`lsn` for PostgreSQL, `file` for MySQL), as
//! Debezium leaves out a field its source schema lacks.

use std::sync::Arc;

use sluice_core::{
    ColumnSchema, ColumnType, Columns, Event, OldKey, Op, Origin, Position, Row, Shape, TableSchema,
    ToCompactString as _, Value,
};

use crate::config::{DeleteHandling, UnwrapConfig};
use crate::rows::{Memo, Tables};
use crate::{Transform, TransformError, Verdict};

pub(crate) struct Unwrap {
    tables: Tables,
    handling: DeleteHandling,
    fields: Vec<Added>,
    names: Memo<[Arc<str>], Columns>,
    schemas: Memo<TableSchema, Arc<TableSchema>>,
}

struct Added {
    field: Field,
    name: Arc<str>,
}

/// The fields `add_fields` may name: the envelope's `op` and the `source`
/// block's fields whose values a replay gives again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Op,
    TsMs,
    TsUs,
    TsNs,
    Connector,
    Db,
    Schema,
    Table,
    TxId,
    Lsn,
    ServerId,
    Gtid,
    File,
    Pos,
    Row,
    Thread,
}

const SOURCE_FIELDS: &str =
    "ts_ms, ts_us, ts_ns, connector, db, schema, table, txId, lsn, server_id, gtid, file, pos, row, thread";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Connector {
    Postgres,
    Mysql,
    Mariadb,
}

impl Connector {
    /// As the Debezium format tells them apart.
    fn of(event: &Event) -> Self {
        match (&event.origin, event.position.base()) {
            (Origin::Mysql { mariadb: false, .. }, _) => Connector::Mysql,
            (Origin::Mysql { .. }, _) | (_, Position::Mysql(_)) => Connector::Mariadb,
            _ => Connector::Postgres,
        }
    }
}

impl Field {
    /// One entry of `add_fields`, as Debezium reads it: `field`,
    /// `struct.field`, either with `:new_name`.
    fn parse(entry: &str, prefix: &str) -> Result<Added, String> {
        let entry = entry.trim();
        let (reference, rename) = match entry.split(':').collect::<Vec<_>>()[..] {
            [reference] => (reference, None),
            [reference, rename] if !rename.is_empty() => (reference, Some(rename)),
            _ => return Err(format!("add_fields: {entry:?} is not `field`, `struct.field` or `field:new_name`")),
        };
        let (block, name) = match reference.split('.').collect::<Vec<_>>()[..] {
            [name] => (None, name),
            [block, name] => (Some(block), name),
            _ => return Err(format!("add_fields: {entry:?} names a field more than one level deep")),
        };
        let field = match (block, name) {
            (None, "op") => Field::Op,
            (None, "ts_ms") => {
                return Err("add_fields: ts_ms is when the event was written out, which a replay changes; \
                            the commit time is source.ts_ms"
                    .into());
            }
            (None, "id" | "total_order" | "data_collection_order") | (Some("transaction"), _) => {
                return Err(format!("add_fields: {entry:?} is a transaction field, which unwrap cannot add"));
            }
            (None | Some("source"), name) => Self::source(name).ok_or_else(|| {
                format!("add_fields: {entry:?} is not a field unwrap can add; it takes op and the source fields {SOURCE_FIELDS}")
            })?,
            (Some(other), _) => return Err(format!("add_fields: {entry:?}: {other:?} is not source or transaction")),
        };
        let suffix = match (rename, block) {
            (Some(rename), _) => rename.to_string(),
            (None, Some(block)) => format!("{block}_{name}"),
            (None, None) => name.to_string(),
        };
        Ok(Added { field, name: format!("{prefix}{suffix}").into() })
    }

    fn source(name: &str) -> Option<Field> {
        Some(match name {
            "ts_ms" => Field::TsMs,
            "ts_us" => Field::TsUs,
            "ts_ns" => Field::TsNs,
            "connector" => Field::Connector,
            "db" => Field::Db,
            "schema" => Field::Schema,
            "table" => Field::Table,
            "txId" => Field::TxId,
            "lsn" => Field::Lsn,
            "server_id" => Field::ServerId,
            "gtid" => Field::Gtid,
            "file" => Field::File,
            "pos" => Field::Pos,
            "row" => Field::Row,
            "thread" => Field::Thread,
            _ => return None,
        })
    }

    /// Whether Debezium's source block for `connector` has the field.
    fn applies(self, connector: Connector) -> bool {
        let postgres = connector == Connector::Postgres;
        match self {
            Field::Schema | Field::TxId | Field::Lsn => postgres,
            Field::ServerId | Field::Gtid | Field::File | Field::Pos | Field::Row | Field::Thread => !postgres,
            _ => true,
        }
    }

    fn column(self, name: &Arc<str>) -> ColumnSchema {
        let (ty, type_name) = match self {
            Field::TsMs
            | Field::TsUs
            | Field::TsNs
            | Field::TxId
            | Field::Lsn
            | Field::ServerId
            | Field::Pos
            | Field::Thread => (ColumnType::Int64, "int8"),
            Field::Row => (ColumnType::Int32, "int4"),
            _ => (ColumnType::Text { length: None }, "text"),
        };
        // Debezium makes every added field optional.
        ColumnSchema { name: Arc::clone(name), type_name: type_name.into(), ty, nullable: true, default: None }
    }

    /// The field's value for `event`, as the Debezium format's `source`
    /// block writes it; `op` is the record's.
    fn value(self, event: &Event, op: &str, connector: Connector) -> Value {
        let long = |v: Option<i64>| v.map_or(Value::Null, Value::Int);
        let mysql = match &event.origin {
            Origin::Mysql { server_id, file, pos, row, thread, gtid, .. } => {
                Some((*server_id, Some(file.to_string()), *pos, *row, *thread, gtid.clone()))
            }
            _ => match event.position.base() {
                Position::Mysql(at) => Some((0, Some(at.file.to_string()), at.offset, 0, None, None)),
                _ => None,
            },
        };
        match self {
            Field::Op => Value::Text(op.into()),
            Field::TsMs => Value::Int(event.commit_time_us.div_euclid(1000)),
            Field::TsUs => Value::Int(event.commit_time_us),
            Field::TsNs => Value::Int(event.commit_time_us.saturating_mul(1000)),
            Field::Connector => Value::Text(
                match connector {
                    Connector::Postgres => "postgresql",
                    Connector::Mysql => "mysql",
                    Connector::Mariadb => "mariadb",
                }
                .into(),
            ),
            Field::Db => Value::Text((&*event.database).into()),
            Field::Schema => Value::Text(event.table.split_once('.').map_or("", |(s, _)| s).into()),
            Field::Table => Value::Text(match connector {
                Connector::Postgres => event.table.split_once('.').map_or(&*event.table, |(_, t)| t).into(),
                _ => event.table.rsplit('.').next().unwrap_or(&event.table).into(),
            }),
            Field::TxId => long(event.tx_id.parse::<i64>().ok()),
            Field::Lsn => long(match (&event.origin, event.position.base()) {
                (Origin::Postgres { lsn, .. }, _) => Some(*lsn as i64),
                (_, Position::Postgres { commit_lsn, .. }) => Some(commit_lsn.0 as i64),
                _ => None,
            }),
            Field::ServerId => long(mysql.as_ref().map(|m| i64::from(m.0))),
            Field::Gtid => mysql.and_then(|m| m.5).map_or(Value::Null, |g| Value::Text((&*g).into())),
            Field::File => mysql.and_then(|m| m.1).map_or(Value::Null, |f| Value::Text(f.into())),
            Field::Pos => long(mysql.as_ref().map(|m| m.2 as i64)),
            Field::Row => long(mysql.as_ref().map(|m| i64::from(m.3))),
            Field::Thread => long(mysql.and_then(|m| m.4).map(i64::from)),
        }
    }
}

const DELETED: &str = "__deleted";

impl Unwrap {
    pub fn new(config: &UnwrapConfig) -> Result<Self, String> {
        let fields = config
            .add_fields
            .iter()
            .map(|entry| Field::parse(entry, &config.add_fields_prefix))
            .collect::<Result<Vec<_>, _>>()?;
        let mut names: Vec<&str> = fields.iter().map(|a| &*a.name).collect();
        if config.delete_handling == DeleteHandling::Rewrite {
            names.push(DELETED);
        }
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(format!("add_fields: two fields are named {:?}", pair[0]));
        }
        Ok(Self {
            tables: Tables::new(&config.tables)?,
            handling: config.delete_handling,
            fields,
            names: Memo::new(),
            schemas: Memo::new(),
        })
    }

    fn rewrite(&self) -> bool {
        self.handling == DeleteHandling::Rewrite
    }

    fn added(&self, connector: Connector) -> impl Iterator<Item = &Added> {
        self.fields.iter().filter(move |a| a.field.applies(connector))
    }

    /// `image` with the added fields, and `__deleted` when rewriting.
    fn flat(&self, event: &Event, image: Row, op: &str, deleted: bool) -> Row {
        let connector = Connector::of(event);
        let columns = self.names.get(&image.columns, |columns| {
            let added = self.added(connector).map(|a| Arc::clone(&a.name));
            let deleted = self.rewrite().then(|| Arc::from(DELETED));
            columns.iter().cloned().chain(deleted).chain(added).collect()
        });
        let mut values = image.values;
        // Debezium's order: `__deleted` first, then the added fields.
        if self.rewrite() {
            values.push(Value::Text(deleted.to_compact_string()));
        }
        values.extend(self.added(connector).map(|a| a.field.value(event, op, connector)));
        Row { columns, values }
    }

    fn schema(&self, schema: &TableSchema, connector: Connector) -> Arc<TableSchema> {
        let mut schema = schema.clone();
        if self.rewrite() {
            // Debezium's `__deleted` is an optional string: "true" or "false".
            schema.columns.push(Field::Op.column(&Arc::from(DELETED)));
        }
        schema.columns.extend(self.added(connector).map(|a| a.field.column(&a.name)));
        Arc::new(schema)
    }
}

impl Transform for Unwrap {
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError> {
        if !self.tables.matches(&event.table) || !event.shape.is_envelope() {
            return Ok(Verdict::Keep);
        }
        match event.op {
            // Not row changes: Debezium passes them on as they are.
            Op::Message | Op::Schema => return Ok(Verdict::Keep),
            Op::Truncate => return Ok(Verdict::Drop),
            Op::Delete => match self.handling {
                DeleteHandling::Drop => return Ok(Verdict::Drop),
                DeleteHandling::Tombstone => event.shape = Shape::Tombstone,
                DeleteHandling::Rewrite => {
                    let Some(before) = event.before.clone().or_else(|| event.key.clone()) else {
                        return Err(TransformError("a delete without its old row cannot be rewritten".into()));
                    };
                    event.after = Some(self.flat(event, before, "d", true));
                    event.shape = Shape::Row(OldKey::Nothing);
                }
            },
            Op::Insert | Op::Read | Op::Update => {
                // A new key is a new row to a keyed consumer: Debezium
                // writes a delete of the old key and a create.
                let moved = event.changes_key();
                let old = match (moved, self.handling) {
                    (false, _) | (true, DeleteHandling::Drop) => OldKey::Nothing,
                    (true, DeleteHandling::Tombstone) => OldKey::Tombstone,
                    (true, DeleteHandling::Rewrite) => {
                        if let Some(before) = event.before.take() {
                            event.before = Some(self.flat(event, before, "d", true));
                        }
                        OldKey::Row
                    }
                };
                let op = if moved { "c" } else { event.op.code() };
                if let Some(after) = event.after.take() {
                    event.after = Some(self.flat(event, after, op, false));
                }
                event.shape = Shape::Row(old);
            }
        }
        if let Some(schema) = &event.schema
            && (self.rewrite() || !self.fields.is_empty())
        {
            let connector = Connector::of(event);
            event.schema = Some(self.schemas.get(schema, |schema| self.schema(schema, connector)));
        }
        Ok(Verdict::Keep)
    }
}
