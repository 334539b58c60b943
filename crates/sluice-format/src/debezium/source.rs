//! The `source` block: where Debezium says an event came from, per
//! connector, and its schema.

use std::fmt::Write as _;

use sluice_core::schema::SnapshotMark;
use sluice_core::{Event, Op, Origin, Position};

use crate::json;

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

pub fn write(out: &mut String, event: &Event, prefix: &str) {
    let ms = event.commit_time_us.div_euclid(1000);
    out.push_str("{\"version\":\"");
    out.push_str(VERSION);
    out.push_str("\",\"connector\":");
    let kind = Connector::of(event);
    json::push_str(out, kind.name());
    out.push_str(",\"name\":");
    json::push_str(out, prefix);
    let _ = write!(out, ",\"ts_ms\":{ms},\"snapshot\":\"{}\",\"db\":", snapshot(event));
    json::push_str(out, &event.database);
    match kind {
        Connector::Postgres => postgres(out, event),
        Connector::Mysql | Connector::Mariadb => mysql(out, event),
    }
    out.push('}');
}

fn timestamps(out: &mut String, event: &Event) {
    let _ = write!(out, ",\"ts_us\":{},\"ts_ns\":{}", event.commit_time_us, event.commit_time_us.saturating_mul(1000));
}

fn postgres(out: &mut String, event: &Event) {
    let (lsn, last_commit) = match &event.origin {
        Origin::Postgres { lsn, last_commit_lsn, .. } => (Some(*lsn), *last_commit_lsn),
        _ => match event.position.base() {
            Position::Postgres { commit_lsn, .. } => (Some(commit_lsn.0), None),
            _ => (None, None),
        },
    };
    out.push_str(",\"sequence\":");
    match lsn {
        Some(lsn) => {
            let last = last_commit.map_or("null".to_string(), |c| format!("\"{c}\""));
            json::push_str(out, &format!("[{last},\"{lsn}\"]"));
        }
        None => out.push_str("null"),
    }
    timestamps(out, event);
    // A message belongs to no table; its `table` is the message prefix.
    let (schema, table) = match event.op {
        Op::Message => ("", ""),
        _ => event.table.split_once('.').unwrap_or(("", &event.table)),
    };
    out.push_str(",\"schema\":");
    json::push_str(out, schema);
    out.push_str(",\"table\":");
    json::push_str(out, table);
    match event.tx_id.parse::<i64>() {
        Ok(tx) => {
            let _ = write!(out, ",\"txId\":{tx}");
        }
        Err(_) => out.push_str(",\"txId\":null"),
    }
    match lsn {
        Some(lsn) => {
            let _ = write!(out, ",\"lsn\":{lsn}");
        }
        None => out.push_str(",\"lsn\":null"),
    }
    out.push_str(",\"xmin\":null,\"origin\":null,\"origin_lsn\":null");
}

fn mysql(out: &mut String, event: &Event) {
    out.push_str(",\"sequence\":null");
    timestamps(out, event);
    out.push_str(",\"table\":");
    json::push_str(out, event.table.rsplit('.').next().unwrap_or(&event.table));
    match &event.origin {
        Origin::Mysql { server_id, file, pos, row, thread, gtid, .. } => {
            let _ = write!(out, ",\"server_id\":{server_id},\"gtid\":");
            match gtid {
                Some(gtid) => json::push_str(out, gtid),
                None => out.push_str("null"),
            }
            out.push_str(",\"file\":");
            json::push_str(out, file);
            let _ = write!(out, ",\"pos\":{pos},\"row\":{row},\"thread\":");
            match thread {
                Some(thread) => {
                    let _ = write!(out, "{thread}");
                }
                None => out.push_str("null"),
            }
        }
        _ => {
            let (file, pos) = match event.position.base() {
                Position::Mysql(pos) => (pos.file.to_string(), pos.offset),
                _ => (String::new(), 0),
            };
            out.push_str(",\"server_id\":0,\"gtid\":null,\"file\":");
            json::push_str(out, &file);
            let _ = write!(out, ",\"pos\":{pos},\"row\":0,\"thread\":null");
        }
    }
    out.push_str(",\"query\":null");
}
