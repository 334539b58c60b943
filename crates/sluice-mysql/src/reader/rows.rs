//! Row and DDL events of the binlog, decoded into Sluice events.

use std::sync::Arc;

use mysql_async::binlog::events::{Event as BinlogEvent, EventData, RowsEventData, TableMapEvent};
use mysql_async::prelude::Queryable;
use sluice_config::DdlLiterals;
use sluice_core::schema_change::{Before, change_row};
use sluice_core::{BinlogPos, Columns, Event, Op, Origin, Position, Row, SourceError, Value};

use super::{Reader, images, unreadable};
use crate::ddl::{Dialect, ddl_targets, redact};
use crate::schema::{TableSchema, read_schema, schema_fingerprint};
use crate::snapshot::quote_ident;
use crate::values::convert;

/// The rows an event carries.
struct Images {
    key: Option<Row>,
    before: Option<Row>,
    after: Option<Row>,
}

impl Reader {
    /// An event of the current transaction, at its next position.
    fn next_event(
        &mut self,
        op: Op,
        database: &str,
        table: &str,
        images: Images,
        schema_version: u32,
    ) -> Result<Event, SourceError> {
        let (position, tx_id, commit_time_us) = self.position()?;
        Ok(Event {
            op,
            source_id: self.source_id.clone(),
            database: database.into(),
            table: table.into(),
            key: images.key,
            before: images.before,
            after: images.after,
            schema_version,
            position,
            tx_id,
            tx_end: false,
            commit_time_us,
            schema: None,
            origin: sluice_core::schema::Origin::None,
            route: None,
            shape: Default::default(),
        })
    }

    /// The schema of `database.table` at the current transaction; read
    /// live and recorded the first time a table is seen.
    async fn schema_at(
        &mut self,
        database: &str,
        table: &str,
        position: &Position,
    ) -> Result<Option<Arc<TableSchema>>, SourceError> {
        let name = format!("{database}.{table}");
        if !self.history.knows(&name) {
            let schema = read_schema(&mut self.schema_conn, database, table).await?;
            self.history.record(&name, position, schema)?;
        }
        Ok(self.history.at(&name, position))
    }

    /// A statement that is not an allow-listed table change (see
    /// [`ddl_targets`]) is dropped here, text and all: a `CREATE USER` or
    /// `GRANT` carries a password, and no captured table is changed by it.
    pub(super) async fn ddl(
        &mut self,
        database: &str,
        sql: &str,
        dialect: Dialect,
        server_id: u32,
        out: &mut Vec<Event>,
    ) -> Result<(), SourceError> {
        let named = ddl_targets(database, sql, dialect);
        let mut targets: Vec<(String, String)> = Vec::new();
        for target in &named {
            if self.matches(&format!("{}.{}", target.0, target.1)) && !targets.contains(target) {
                targets.push(target.clone());
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        // A rename from a name the patterns leave out brings in a table
        // whose rows the stream never showed.
        let renames_in =
            sql.split_whitespace().take(8).any(|w| w.eq_ignore_ascii_case("rename")) && named.len() > targets.len();
        let text = match self.ddl_literals {
            DdlLiterals::Redact => redact(sql, dialect),
            DdlLiterals::Keep => sql.to_string(),
        };
        // A truncate changes rows, not the schema: it is a truncate event
        // (`t`), as PostgreSQL's are.
        let truncate = sql.trim_start().get(..8).is_some_and(|w| w.eq_ignore_ascii_case("truncate"));
        let words: Vec<String> = sql.split_whitespace().take(6).map(str::to_ascii_uppercase).collect();
        let creates = words.first().is_some_and(|w| w == "CREATE")
            && words.iter().any(|w| w == "TABLE")
            && !words.iter().any(|w| w == "INDEX");
        // One event per captured table the statement changes (both names
        // of a rename), each recording that table's schema after it.
        for (db, table) in targets {
            let name = format!("{db}.{table}");
            let position = self.peek_position()?;
            let before = self.history.before(&name, &position).map(|s| s.map(|s| s.entries()));
            // Recorded once, when first read; a replay keeps the recorded schema.
            if !self.history.has_entry_at(&name, &position) {
                // MySQL sends a statement once it is in the binlog, before
                // it commits: information_schema may still show the columns
                // before it. The statement holds the table's lock until it
                // commits, and this read waits for it (its error, for a
                // table that is gone, says nothing the read below misses).
                let wait = format!("SELECT 1 FROM {}.{} LIMIT 0", quote_ident(&db), quote_ident(&table));
                let _ = self.schema_conn.query_drop(wait).await;
                let schema = read_schema(&mut self.schema_conn, &db, &table).await?;
                let known = matches!(before, Some(Some(_)));
                // Asked before the history entry is written: a crash in
                // between asks again, which re-reads, and loses nothing.
                if renames_in && !known && schema.is_some() {
                    self.read_arrival(&name).await;
                }
                self.history.record(&name, &position, schema)?;
            }
            if truncate {
                let Some(schema) = self.history.at(&name, &position) else { continue };
                let images = Images { key: None, before: None, after: None };
                let mut event = self.next_event(Op::Truncate, &db, &name, images, schema_fingerprint(&schema))?;
                event.schema = Some(self.declared(&schema));
                event.origin = self.origin(server_id);
                self.emit(event, out);
                continue;
            }
            let old = match &before {
                Some(Some(columns)) => Before::Columns(columns),
                Some(None) => Before::Absent,
                // First seen at this statement: a table it creates (or
                // renames in) was not there under this name; of any other,
                // the columns before are unknown.
                None if creates || renames_in => Before::Absent,
                None => Before::Unknown,
            };
            let now = self.history.at(&name, &position).map(|s| s.entries());
            let after = change_row(&db, Some(text.clone()), old, now.as_deref());
            let images = Images { key: None, before: None, after: Some(after) };
            let event = self.next_event(Op::Schema, &db, &name, images, 0)?;
            self.emit(event, out);
        }
        Ok(())
    }

    pub(super) async fn rows(&mut self, event: &BinlogEvent, out: &mut Vec<Event>) -> Result<(), SourceError> {
        let data = event.read_data().map_err(|e| unreadable("rows event", e))?;
        let Some(EventData::RowsEvent(rows)) = data else { return Ok(()) };
        let tme: TableMapEvent<'static> = self
            .stream
            .get_tme(rows.table_id())
            .ok_or_else(|| unreadable("rows event", "no table map for its table id"))?
            .clone();
        let (database, table) = (tme.database_name().to_string(), tme.table_name().to_string());
        let name = format!("{database}.{table}");
        if !self.matches(&name) {
            return Ok(());
        }
        let op = match &rows {
            RowsEventData::WriteRowsEventV1(_) | RowsEventData::WriteRowsEvent(_) => Op::Insert,
            RowsEventData::UpdateRowsEventV1(_)
            | RowsEventData::UpdateRowsEvent(_)
            | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
            RowsEventData::DeleteRowsEventV1(_) | RowsEventData::DeleteRowsEvent(_) => Op::Delete,
        };
        let probe = self.peek_position()?;
        let schema = self.schema_at(&database, &table, &probe).await?.ok_or_else(|| {
            SourceError::permanent(
                format!("rows for {name} arrived, but its schema history says the table did not exist then"),
                "if the binlog was reset (RESET MASTER) or the server replaced, run `sluice checkpoints reset --pipeline <name> --yes`, which resets the checkpoints and moves the schema history aside",
            )
        })?;
        let count = tme.columns_count() as usize;
        if count != schema.columns.len() {
            return Err(SourceError::permanent(
                format!(
                    "{name} has {count} columns in the binlog but {} in the recorded schema: the table changed before Sluice recorded it",
                    schema.columns.len()
                ),
                "reset this source's checkpoints and take a new snapshot so the schema is read at a known point",
            ));
        }
        let parts = self.parts(&schema);
        let TableParts { columns, key_columns, key_index, .. } = &*parts;
        let plan = images::plan(&tme).map_err(|e| unreadable("table map", e))?;
        let convert_row = |image: &images::Image<'_>| -> Result<Row, SourceError> {
            // Sized up front: collected through `Result`, the vector grew
            // from four values and moved once on every row of five or more.
            let mut values = Vec::with_capacity(plan.len());
            for ((value, column), info) in image.iter().zip(&plan).zip(&schema.columns) {
                values.push(match value {
                    Some(value) => convert(value, column.kind, column.meta, info, &name, &probe)?,
                    None => Value::Unchanged,
                });
            }
            Ok(Row { columns: columns.clone(), values })
        };
        let fingerprint = schema_fingerprint(&schema);
        let origin = self.origin(event.header().server_id());
        let images = images::read(&rows, &tme, &plan).map_err(|e| unreadable("row", e))?;
        let mut decoded = Vec::with_capacity(images.len());
        for (before, after) in images {
            decoded.push((before.as_ref().map(convert_row).transpose()?, after.as_ref().map(convert_row).transpose()?));
        }
        for (row, (before, after)) in (0u32..).zip(decoded) {
            let image = after.as_ref().or(before.as_ref());
            let key = (!key_index.is_empty()).then(|| Row {
                columns: key_columns.clone(),
                values: key_index.iter().map(|i| image.map_or(Value::Null, |r| r.values[*i].clone())).collect(),
            });
            let mut event = self.next_event(op, &database, &name, Images { key, before, after }, fingerprint)?;
            event.schema = Some(parts.declared.clone());
            event.origin = origin.clone();
            if let Origin::Mysql { row: index, .. } = &mut event.origin {
                *index = row;
            }
            self.emit(event, out);
        }
        Ok(())
    }

    /// `schema` as formats see it, converted once per recorded version.
    fn declared(&mut self, schema: &Arc<TableSchema>) -> Arc<sluice_core::TableSchema> {
        self.parts(schema).declared.clone()
    }

    /// What the rows of `schema` share, worked out once per recorded
    /// version: every row of the version holds the same column lists,
    /// which sinks key their own per-table work on.
    fn parts(&mut self, schema: &Arc<TableSchema>) -> Arc<TableParts> {
        let key = Arc::as_ptr(schema) as usize;
        self.parts.entry(key).or_insert_with(|| Arc::new(TableParts::of(schema))).clone()
    }

    /// Where the current statement's rows are in the binlog.
    fn origin(&self, server_id: u32) -> Origin {
        let (Some(file), Some(tx)) = (&self.file, &self.tx) else { return Origin::None };
        let gtid = match &tx.gtid {
            Some(gtid) => Some(Arc::from(gtid.to_string())),
            None if !self.mariadb => Some(tx.tx_id.clone()),
            None => None,
        };
        Origin::Mysql {
            server_id,
            file: file.clone(),
            pos: tx.statement_start,
            row: 0,
            thread: None,
            gtid,
            mariadb: self.mariadb,
            tx: None,
        }
    }

    /// The position the next event of the transaction will get.
    fn peek_position(&self) -> Result<Position, SourceError> {
        let file = self.file.clone().ok_or_else(|| unreadable("event", "a row before any rotate event"))?;
        let tx = self.tx.as_ref().ok_or_else(|| unreadable("event", "a row outside a transaction"))?;
        Ok(Position::Mysql(BinlogPos { file, offset: tx.offset, seq: tx.seq, gtid_before: tx.gtid_before.clone() }))
    }
}

/// The parts of one recorded table version its rows share.
pub(crate) struct TableParts {
    /// Held, so the address that keys it cannot be reused.
    _schema: Arc<TableSchema>,
    declared: Arc<sluice_core::TableSchema>,
    columns: Columns,
    key_columns: Columns,
    key_index: Vec<usize>,
}

impl TableParts {
    fn of(schema: &Arc<TableSchema>) -> Self {
        let columns: Columns = schema.columns.iter().map(|c| Arc::from(c.name.as_str())).collect();
        let key_index: Vec<usize> = schema.columns.iter().enumerate().filter(|(_, c)| c.key).map(|(i, _)| i).collect();
        let key_columns: Columns = key_index.iter().map(|i| columns[*i].clone()).collect();
        let declared = Arc::new(crate::declared::table_schema(schema));
        Self { _schema: schema.clone(), declared, columns, key_columns, key_index }
    }
}
