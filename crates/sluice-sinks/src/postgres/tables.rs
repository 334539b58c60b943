//! The target tables: which target table an event goes to, its key, and
//! making it fit the event's columns (create it, add columns, widen a
//! type) before any row is written, inside the batch's transaction.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::{Event, SinkError};

use crate::db::plan::{CHANGELOG_COLUMNS, Table};
use sluice_pgwire::Connection;

use super::config::{ApplyMode, PostgresSinkConfig, SchemaEvolution};
use super::text::{ident, quote_literal};
use super::types::{holds, target_type, type_of_value};
use super::{db_error, fail};

/// The types of a changelog table's columns ([`CHANGELOG_COLUMNS`], in order).
const CHANGELOG_TYPES: [&str; 9] =
    ["uuid", "text", "text", "text", "timestamp with time zone", "text", "jsonb", "jsonb", "jsonb"];

/// Target tables by source table. Cleared whenever a transaction fails,
/// since DDL rolls back with it.
#[derive(Debug, Default)]
pub struct Tables {
    by_source: HashMap<Arc<str>, Table>,
    /// Set when a table's columns changed; the sink's staging tables of
    /// the old shape must go.
    pub altered: bool,
}

impl Tables {
    pub fn clear(&mut self) {
        self.by_source.clear();
    }

    /// The target table of `event`, made to fit its columns.
    pub async fn fit(
        &mut self,
        conn: &mut Connection,
        config: &PostgresSinkConfig,
        event: &Event,
    ) -> Result<&Table, SinkError> {
        let fresh = self.by_source.get(&event.table).is_none_or(|t| t.version != Some(event.schema_version));
        if fresh {
            let (schema, name) = crate::db::target_name(&config.schema, &config.table, event);
            let mut table = Table {
                name: format!("{}.{}", ident(&schema), ident(&name)),
                display: format!("{schema}.{name}"),
                key: crate::db::key_of(&config.keys, config.mode, &config.columns, event)
                    .map_err(|(detail, hint)| fail(config, detail, hint))?,
                columns: read_columns(conn, &schema, &name).await?,
                version: None,
            };
            let wanted = wanted_columns(config, event);
            if table.columns.is_empty() {
                create(conn, config, &schema, &mut table, &wanted).await?;
            } else {
                self.altered |= evolve(conn, config, &mut table, &wanted).await?;
            }
            table.version = Some(event.schema_version);
            self.by_source.insert(event.table.clone(), table);
        }
        self.by_source.get(&event.table).ok_or_else(|| SinkError::transient("target table vanished from the cache"))
    }
}

/// The target columns the event's table needs, with their types.
fn wanted_columns(config: &PostgresSinkConfig, event: &Event) -> Vec<(String, String)> {
    if config.mode == ApplyMode::Changelog {
        return CHANGELOG_COLUMNS.iter().zip(CHANGELOG_TYPES).map(|(c, t)| (c.to_string(), t.to_string())).collect();
    }
    let keeps = |c: &str| config.columns.keeps(&event.table, c);
    match &event.schema {
        Some(schema) => {
            schema.columns.iter().filter(|c| keeps(&c.name)).map(|c| (c.name.to_string(), target_type(c))).collect()
        }
        None => {
            let row = event.after.as_ref().or(event.before.as_ref());
            row.map(|r| {
                r.columns
                    .iter()
                    .zip(&r.values)
                    .filter(|(c, _)| keeps(c))
                    .map(|(c, v)| (c.to_string(), type_of_value(v).to_string()))
                    .collect()
            })
            .unwrap_or_default()
        }
    }
}

async fn read_columns(conn: &mut Connection, schema: &str, table: &str) -> Result<Vec<(String, String)>, SinkError> {
    let sql = format!(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a \
         WHERE a.attrelid = to_regclass({}) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        quote_literal(&format!("{}.{}", ident(schema), ident(table)))
    );
    let rows = conn.simple_query(&sql).await.map_err(|e| db_error(&e, "reading the target table's columns"))?;
    Ok(rows
        .rows
        .iter()
        .filter_map(|r| Some((rows.get(r, "attname")?.to_string(), rows.get(r, "type")?.to_string())))
        .collect())
}

async fn create(
    conn: &mut Connection,
    config: &PostgresSinkConfig,
    schema: &str,
    table: &mut Table,
    wanted: &[(String, String)],
) -> Result<(), SinkError> {
    if !config.auto_create {
        return Err(fail(
            config,
            format!("target table {} does not exist", table.display),
            "create it, or set auto_create: true",
        ));
    }
    let mut columns: Vec<String> = wanted.iter().map(|(c, t)| format!("{} {t}", ident(c))).collect();
    let key = if config.mode == ApplyMode::Changelog { vec![Arc::from("event_id")] } else { table.key.clone() };
    columns.push(format!("PRIMARY KEY ({})", key.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ")));
    let sql = format!("CREATE TABLE IF NOT EXISTS {} ({})", table.name, columns.join(", "));
    create_locked(conn, schema, &table.name, &sql, &format!("creating target table {}", table.display)).await?;
    tracing::info!(table = %table.display, "created the target table");
    table.columns = wanted.to_vec();
    Ok(())
}

/// Runs `create` (a `CREATE … IF NOT EXISTS` of the table `name`), after
/// creating `schema` if it is missing. Sinks of several pipelines open
/// at once against one target, and `IF NOT EXISTS` is not atomic: the
/// loser of a race fails on the catalog's unique index. So the statements
/// run under a transaction-scoped advisory lock keyed on the name, which
/// needs no privilege; a second creator waits, then finds the table. Inside
/// a batch's transaction the lock is held to its end.
pub(super) async fn create_locked(
    conn: &mut Connection,
    schema: &str,
    name: &str,
    create: &str,
    doing: &str,
) -> Result<(), SinkError> {
    let mut sql = format!("SELECT pg_advisory_xact_lock(hashtext('sluice create table'), hashtext({}));", quote_literal(name));
    // `CREATE SCHEMA IF NOT EXISTS` needs the CREATE privilege on the
    // database even when the schema exists.
    let found = format!("SELECT 1 AS found FROM pg_namespace WHERE nspname = {}", quote_literal(schema));
    let rows = conn.simple_query(&found).await.map_err(|e| db_error(&e, "looking up the target schema"))?;
    if rows.rows.is_empty() {
        sql.push_str(&format!(" CREATE SCHEMA IF NOT EXISTS {};", ident(schema)));
    }
    sql.push(' ');
    sql.push_str(create);
    conn.simple_query(&sql).await.map_err(|e| db_error(&e, doing))?;
    Ok(())
}

/// Adds missing columns and widens narrower ones, or says why it cannot.
/// True when it changed the table.
async fn evolve(
    conn: &mut Connection,
    config: &PostgresSinkConfig,
    table: &mut Table,
    wanted: &[(String, String)],
) -> Result<bool, SinkError> {
    let evolve = config.schema_evolution == SchemaEvolution::AddColumns && config.mode == ApplyMode::Apply;
    let mut changes = Vec::new();
    for (column, ty) in wanted {
        match table.columns.iter().find(|(c, _)| c == column) {
            Some((_, existing)) if holds(existing, ty) => {}
            Some((_, existing)) if evolve && holds(ty, existing) => {
                changes.push(format!("ALTER COLUMN {} TYPE {ty}", ident(column)));
            }
            Some((_, existing)) => {
                return Err(fail(
                    config,
                    format!(
                        "column {column} of target table {} is {existing}, which cannot hold the source's {ty}",
                        table.display
                    ),
                    format!("change the target column to {ty} (or a wider type), then restart the pipeline"),
                ));
            }
            None if evolve => changes.push(format!("ADD COLUMN {} {ty}", ident(column))),
            None => {
                return Err(fail(
                    config,
                    format!("target table {} has no column {column}", table.display),
                    format!("add it as {ty}, or set schema_evolution: add_columns"),
                ));
            }
        }
    }
    if changes.is_empty() {
        return Ok(false);
    }
    let sql = format!("ALTER TABLE {} {}", table.name, changes.join(", "));
    conn.simple_query(&sql).await.map_err(|e| db_error(&e, &format!("altering target table {}", table.display)))?;
    tracing::info!(table = %table.display, changes = %changes.join(", "), "changed the target table to fit the source");
    for (column, ty) in wanted {
        match table.columns.iter_mut().find(|(c, _)| c == column) {
            Some(existing) => existing.1 = ty.clone(),
            None => table.columns.push((column.clone(), ty.clone())),
        }
    }
    Ok(true)
}
