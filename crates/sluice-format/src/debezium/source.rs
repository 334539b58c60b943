//! The `source` block: where Debezium says an event came from, per
//! connector, and its schema.

use std::fmt::Write as _;

use sluice_core::schema::SnapshotMark;
use sluice_core::{Event, Op, Origin, Position};

use super::out::Out;

/// The version Sluice writes where Debezium writes its own.
const VERSION: &str = concat!("sluice-", env!("CARGO_PKG_VERSION"));

pub const TRANSACTION_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"}"#;

const SNAPSHOT_FIELD: &str = r#"{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"}"#;

const COMMON_FIELDS: &str = r#"{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},"#;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    Postgres,
    Mysql,
    Mariadb,
}

impl Connector {
    pub fn of(event: &Event) -> Connector {
        match (&event.origin, event.position.base()) {
            (Origin::Mysql { mariadb: false, .. }, _) => Connector::Mysql,
            (_, Position::Mysql(_)) => Connector::Mariadb,
            _ => Connector::Postgres,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Connector::Postgres => "postgresql",
            Connector::Mysql => "mysql",
            Connector::Mariadb => "mariadb",
        }
    }
}

/// `schema.table` for PostgreSQL, `db.table` for MySQL: the part of
/// topic and schema names after the prefix.
pub fn collection(event: &Event) -> String {
    match Connector::of(event) {
        Connector::Postgres => event.table.to_string(),
        _ if event.table.contains('.') => event.table.to_string(),
        _ => format!("{}.{}", event.database, event.table),
    }
}

pub fn schema(event: &Event) -> String {
    let connector = Connector::of(event);
    match connector {
        Connector::Postgres => format!(
            r#"{{"type":"struct","fields":[{COMMON_FIELDS}{SNAPSHOT_FIELD},{{"type":"string","optional":false,"field":"db"}},{{"type":"string","optional":true,"field":"sequence"}},{{"type":"int64","optional":true,"field":"ts_us"}},{{"type":"int64","optional":true,"field":"ts_ns"}},{{"type":"string","optional":false,"field":"schema"}},{{"type":"string","optional":false,"field":"table"}},{{"type":"int64","optional":true,"field":"txId"}},{{"type":"int64","optional":true,"field":"lsn"}},{{"type":"int64","optional":true,"field":"xmin"}},{{"type":"string","optional":true,"field":"origin"}},{{"type":"int64","optional":true,"field":"origin_lsn"}}],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}}"#
        ),
        Connector::Mysql | Connector::Mariadb => format!(
            r#"{{"type":"struct","fields":[{COMMON_FIELDS}{SNAPSHOT_FIELD},{{"type":"string","optional":false,"field":"db"}},{{"type":"string","optional":true,"field":"sequence"}},{{"type":"int64","optional":true,"field":"ts_us"}},{{"type":"int64","optional":true,"field":"ts_ns"}},{{"type":"string","optional":true,"field":"table"}},{{"type":"int64","optional":false,"field":"server_id"}},{{"type":"string","optional":true,"field":"gtid"}},{{"type":"string","optional":false,"field":"file"}},{{"type":"int64","optional":false,"field":"pos"}},{{"type":"int32","optional":false,"field":"row"}},{{"type":"int64","optional":true,"field":"thread"}},{{"type":"string","optional":true,"field":"query"}}],"optional":false,"name":"io.debezium.connector.{}.Source","version":1,"field":"source"}}"#,
            connector.name()
        ),
    }
}

fn snapshot(event: &Event) -> &'static str {
    match (&event.origin, event.op) {
        (Origin::Snapshot(SnapshotMark::First), _) => "first",
        (Origin::Snapshot(SnapshotMark::FirstInTable), _) => "first_in_data_collection",
        (Origin::Snapshot(SnapshotMark::LastInTable), _) => "last_in_data_collection",
        (Origin::Snapshot(SnapshotMark::Last), _) => "last",
        (Origin::Snapshot(SnapshotMark::Incremental), _) => "incremental",
        (_, Op::Read) => "true",
        _ => "false",
    }
}

pub fn write<O: Out>(out: &mut O, event: &Event, prefix: &str) -> Result<(), String> {
    let kind = Connector::of(event);
    out.begin_struct()?;
    out.key("version")?;
    out.str(VERSION)?;
    out.key("connector")?;
    out.str(kind.name())?;
    out.key("name")?;
    out.str(prefix)?;
    out.key("ts_ms")?;
    out.long(event.commit_time_us.div_euclid(1000))?;
    out.key("snapshot")?;
    out.str(snapshot(event))?;
    out.key("db")?;
    out.str(&event.database)?;
    match kind {
        Connector::Postgres => postgres(out, event)?,
        Connector::Mysql | Connector::Mariadb => mysql(out, event)?,
    }
    out.end_struct()
}

fn timestamps<O: Out>(out: &mut O, event: &Event) -> Result<(), String> {
    out.key("ts_us")?;
    out.long(event.commit_time_us)?;
    out.key("ts_ns")?;
    out.long(event.commit_time_us.saturating_mul(1000))
}

fn optional_long<O: Out>(out: &mut O, value: Option<i64>) -> Result<(), String> {
    match value {
        Some(value) => out.long(value),
        None => out.null(),
    }
}

fn optional_str<O: Out>(out: &mut O, value: Option<&str>) -> Result<(), String> {
    match value {
        Some(value) => out.str(value),
        None => out.null(),
    }
}

fn postgres<O: Out>(out: &mut O, event: &Event) -> Result<(), String> {
    let (lsn, last_commit) = match &event.origin {
        Origin::Postgres { lsn, last_commit_lsn, .. } => (Some(*lsn), *last_commit_lsn),
        _ => match event.position.base() {
            Position::Postgres { commit_lsn, .. } => (Some(commit_lsn.0), None),
            _ => (None, None),
        },
    };
    out.key("sequence")?;
    let sequence = lsn.map(|lsn| {
        let mut text = String::with_capacity(48);
        match last_commit {
            Some(last) => {
                let _ = write!(text, "[\"{last}\",\"{lsn}\"]");
            }
            None => {
                let _ = write!(text, "[null,\"{lsn}\"]");
            }
        }
        text
    });
    optional_str(out, sequence.as_deref())?;
    timestamps(out, event)?;
    // A message belongs to no table; its `table` is the message prefix.
    let (schema, table) = match event.op {
        Op::Message => ("", ""),
        _ => event.table.split_once('.').unwrap_or(("", &event.table)),
    };
    out.key("schema")?;
    out.str(schema)?;
    out.key("table")?;
    out.str(table)?;
    out.key("txId")?;
    optional_long(out, event.tx_id.parse::<i64>().ok())?;
    out.key("lsn")?;
    optional_long(out, lsn.map(|lsn| lsn as i64))?;
    for field in ["xmin", "origin", "origin_lsn"] {
        out.key(field)?;
        out.null()?;
    }
    Ok(())
}

fn mysql<O: Out>(out: &mut O, event: &Event) -> Result<(), String> {
    out.key("sequence")?;
    out.null()?;
    timestamps(out, event)?;
    out.key("table")?;
    out.str(event.table.rsplit('.').next().unwrap_or(&event.table))?;
    let fallback;
    let (server_id, gtid, file, pos, row, thread) = match &event.origin {
        Origin::Mysql { server_id, file, pos, row, thread, gtid, .. } => {
            (i64::from(*server_id), gtid.as_deref(), &**file, *pos as i64, i64::from(*row), thread.map(|t| t as i64))
        }
        _ => {
            fallback = match event.position.base() {
                Position::Mysql(pos) => (pos.file.to_string(), pos.offset),
                _ => (String::new(), 0),
            };
            (0, None, fallback.0.as_str(), fallback.1 as i64, 0, None)
        }
    };
    out.key("server_id")?;
    out.long(server_id)?;
    out.key("gtid")?;
    optional_str(out, gtid)?;
    out.key("file")?;
    out.str(file)?;
    out.key("pos")?;
    out.long(pos)?;
    out.key("row")?;
    out.long(row)?;
    out.key("thread")?;
    optional_long(out, thread)?;
    out.key("query")?;
    out.null()
}
