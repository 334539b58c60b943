//! The target tables of the mysql sink: which table an event goes to, its
//! key, and making it fit the event's columns. MySQL commits the open
//! transaction before any DDL, so a change to a table is never made inside
//! a batch: the batch is rolled back, the table changed on its own, and
//! the batch written again.

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sluice_core::{Event, SinkError};

use super::config::{ApplyMode, MysqlSinkConfig, SchemaEvolution};
use super::text::{ident, quoted};
use super::types::{holds, normalize, target_type, type_of_value};
use super::{fail, my_error};
use crate::db::plan::{CHANGELOG_COLUMNS, Table};

const CHANGELOG_TYPES: [&str; 9] =
    ["char(36)", "char(1)", "varchar(512)", "varchar(255)", "datetime(6)", "varchar(255)", "json", "json", "json"];

/// Target tables by source table; cleared with the session.
#[derive(Debug, Default)]
pub struct Tables {
    by_source: HashMap<Arc<str>, Table>,
}

/// What fitting a table came to.
pub enum Fit<'a> {
    Ready(&'a Table),
    /// The table had to be created or changed; that is done, and the
    /// open transaction (which MySQL committed first) must start over.
    Changed(String),
}

impl Tables {
    pub fn clear(&mut self) {
        self.by_source.clear();
    }

    pub async fn fit(&mut self, conn: &mut Conn, config: &MysqlSinkConfig, event: &Event) -> Result<Fit<'_>, SinkError> {
        let fresh = self.by_source.get(&event.table).is_none_or(|t| t.version != Some(event.schema_version));
        if fresh {
            let (schema, name) = crate::db::target_name(&config.schema, &config.table, event);
            let key = crate::db::key_of(&config.keys, config.mode, &config.columns, event)
                .map_err(|(detail, hint)| fail(config, detail, hint))?;
            let columns = read_columns(conn, &schema, &name).await?;
            let wanted = wanted_columns(config, event, &key);
            let shown = format!("{schema}.{name}");
            let change = if columns.is_empty() {
                Some(create(config, &schema, &name, &shown, &key, &wanted)?)
            } else {
                evolve(config, &schema, &name, &shown, &columns, &wanted)?
            };
            if let Some(ddl) = change {
                // Whatever the batch wrote so far goes; DDL would commit it.
                conn.query_drop("ROLLBACK").await.map_err(|e| my_error(e, "rolling back before DDL"))?;
                for statement in ddl {
                    conn.query_drop(&statement).await.map_err(|e| my_error(e, &format!("changing {shown}")))?;
                }
                tracing::info!(table = %shown, "made the target table fit the source");
                return Ok(Fit::Changed(shown));
            }
            let name = format!("{}.{}", ident(&schema), ident(&name));
            let table = Table { name, display: shown, key, columns, version: Some(event.schema_version) };
            self.by_source.insert(event.table.clone(), table);
        }
        let table = self.by_source.get(&event.table).ok_or_else(|| SinkError::transient("table cache lost"))?;
        Ok(Fit::Ready(table))
    }
}

fn wanted_columns(config: &MysqlSinkConfig, event: &Event, key: &[Arc<str>]) -> Vec<(String, String)> {
    if config.mode == ApplyMode::Changelog {
        return CHANGELOG_COLUMNS.iter().zip(CHANGELOG_TYPES).map(|(c, t)| (c.to_string(), t.to_string())).collect();
    }
    let keeps = |c: &str| config.columns.keeps(&event.table, c);
    let in_key = |c: &str| key.iter().any(|k| &**k == c);
    match &event.schema {
        Some(schema) => schema
            .columns
            .iter()
            .filter(|c| keeps(&c.name))
            .map(|c| (c.name.to_string(), target_type(c, in_key(&c.name))))
            .collect(),
        None => event
            .after
            .as_ref()
            .or(event.before.as_ref())
            .map(|r| {
                r.columns
                    .iter()
                    .zip(&r.values)
                    .filter(|(c, _)| keeps(c))
                    .map(|(c, v)| (c.to_string(), type_of_value(v, in_key(c)).to_string()))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

async fn read_columns(conn: &mut Conn, schema: &str, table: &str) -> Result<Vec<(String, String)>, SinkError> {
    let sql = format!(
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {} AND TABLE_NAME = {} ORDER BY ORDINAL_POSITION",
        quoted(schema),
        quoted(table)
    );
    let rows: Vec<(String, String)> =
        conn.query(sql).await.map_err(|e| my_error(e, "reading the target table's columns"))?;
    Ok(rows.into_iter().map(|(c, t)| (c, normalize(&t))).collect())
}

fn create(
    config: &MysqlSinkConfig,
    schema: &str,
    name: &str,
    display: &str,
    key: &[Arc<str>],
    wanted: &[(String, String)],
) -> Result<Vec<String>, SinkError> {
    if !config.auto_create {
        return Err(fail(config, format!("target table {display} does not exist"), "create it, or set auto_create: true"));
    }
    let mut columns: Vec<String> = wanted.iter().map(|(c, t)| format!("{} {t}", ident(c))).collect();
    let key: Vec<String> = if config.mode == ApplyMode::Changelog {
        vec![ident("event_id")]
    } else {
        key.iter().map(|c| ident(c)).collect()
    };
    columns.push(format!("PRIMARY KEY ({})", key.join(", ")));
    Ok(vec![
        format!("CREATE DATABASE IF NOT EXISTS {} CHARACTER SET utf8mb4", ident(schema)),
        format!(
            "CREATE TABLE IF NOT EXISTS {}.{} ({}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            ident(schema),
            ident(name),
            columns.join(", ")
        ),
    ])
}

fn evolve(
    config: &MysqlSinkConfig,
    schema: &str,
    name: &str,
    display: &str,
    columns: &[(String, String)],
    wanted: &[(String, String)],
) -> Result<Option<Vec<String>>, SinkError> {
    let evolve = config.schema_evolution == SchemaEvolution::AddColumns && config.mode == ApplyMode::Apply;
    let mut changes = Vec::new();
    for (column, ty) in wanted {
        match columns.iter().find(|(c, _)| c == column) {
            Some((_, existing)) if holds(existing, ty) => {}
            Some((_, existing)) if evolve && holds(ty, existing) => {
                changes.push(format!("MODIFY COLUMN {} {ty}", ident(column)));
            }
            Some((_, existing)) => {
                return Err(fail(
                    config,
                    format!("column {column} of target table {display} is {existing}, which cannot hold the source's {ty}"),
                    format!("change the target column to {ty} (or a wider type), then restart the pipeline"),
                ));
            }
            None if evolve => changes.push(format!("ADD COLUMN {} {ty}", ident(column))),
            None => {
                return Err(fail(
                    config,
                    format!("target table {display} has no column {column}"),
                    format!("add it as {ty}, or set schema_evolution: add_columns"),
                ));
            }
        }
    }
    if changes.is_empty() {
        return Ok(None);
    }
    Ok(Some(vec![format!("ALTER TABLE {}.{} {}", ident(schema), ident(name), changes.join(", "))]))
}
