//! Table schemas from information_schema, and their persisted history.
//!
//! A binlog row carries values but not column names, signedness, enum
//! labels or character sets. Those come from information_schema, which
//! only knows the schema of *now*. So each schema Sluice reads is stored
//! with the binlog position it holds from (at start, and after every DDL
//! statement), in an append-only file; replaying old binlog after an
//! `ALTER TABLE` then decodes with the schema in force when the rows were
//! written. The table-map event's column count and types are checked
//! against the stored schema, so a mismatch stops the source instead of
//! mislabelling columns.

use mysql_async::prelude::Queryable;
use serde::{Deserialize, Serialize};
use sluice_core::schema_change::ColumnEntry;
use sluice_core::{Position, SourceError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ColumnInfo {
    pub name: String,
    /// `int`, `varchar`, `enum`, ... (information_schema DATA_TYPE).
    pub data_type: String,
    pub unsigned: bool,
    /// Labels of an enum or set, in declaration order.
    pub labels: Vec<String>,
    /// The character set of character data; `None` for binary strings,
    /// blobs and non-string types.
    pub charset: Option<String>,
    /// A MariaDB JSON column (LONGTEXT checked by json_valid).
    pub json: bool,
    pub key: bool,
    /// The declared length in bytes of a `BINARY(n)` column. The binlog
    /// drops a fixed-length binary value's trailing zero bytes, which the
    /// server's own reads keep; the stream pads values back to this.
    /// Absent in history written before Sluice recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_length: Option<usize>,
    /// information_schema COLUMN_TYPE (`decimal(12,2)`, `datetime(6)`),
    /// for formats that describe columns. Empty in older history.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub column_type: String,
    /// `None` in older history (taken as nullable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nullable: Option<bool>,
    /// COLUMN_DEFAULT as the server shows it (`42`, `'hello'`, `NULL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The column's place in the primary key, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_order: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub columns: Vec<ColumnInfo>,
}

impl TableSchema {
    /// The columns as a schema-change event lists them.
    pub fn entries(&self) -> Vec<ColumnEntry> {
        let entry = |c: &ColumnInfo| ColumnEntry {
            name: c.name.clone(),
            type_name: if c.column_type.is_empty() { c.data_type.clone() } else { c.column_type.clone() },
            nullable: c.nullable.unwrap_or(true),
            key: c.key,
        };
        self.columns.iter().map(entry).collect()
    }
}

/// The MySQL source's schemas by table (see [`sluice_core::history`]).
pub type SchemaHistory = sluice_core::history::SchemaHistory<TableSchema>;

fn query_error(e: mysql_async::Error) -> SourceError {
    crate::errors::mysql_error("information_schema query", e)
}

/// One information_schema.COLUMNS row: name, data type, column type,
/// character set, key, byte length.
type ColumnRow = (String, String, String, Option<String>, String, Option<u64>, String, Option<String>);

/// The current schema of `database.table`, or `None` if it does not exist.
pub async fn read_schema(
    conn: &mut mysql_async::Conn,
    database: &str,
    table: &str,
) -> Result<Option<TableSchema>, SourceError> {
    let rows: Vec<ColumnRow> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, COLUMN_KEY, CHARACTER_OCTET_LENGTH, \
               IS_NULLABLE, COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(query_error)?;
    if rows.is_empty() {
        return Ok(None);
    }
    // MariaDB stores JSON as LONGTEXT with a json_valid() check.
    let checks: Vec<String> = conn
        .exec(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?",
            (database, table),
        )
        .await
        .unwrap_or_default();
    let primary: Vec<String> = conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(query_error)?;
    let columns = rows
        .into_iter()
        .map(|(name, data_type, column_type, charset, key, octets, nullable, default)| {
            let data_type = data_type.to_ascii_lowercase();
            let json =
                data_type == "json" || checks.iter().any(|c| c.replace(' ', "") == format!("json_valid(`{name}`)"));
            ColumnInfo {
                unsigned: column_type.contains("unsigned"),
                labels: if matches!(data_type.as_str(), "enum" | "set") { labels(&column_type) } else { Vec::new() },
                charset: charset.map(|c| c.to_ascii_lowercase()),
                json,
                key: key == "PRI",
                fixed_length: if data_type == "binary" { octets.and_then(|n| usize::try_from(n).ok()) } else { None },
                nullable: Some(nullable == "YES"),
                default,
                key_order: primary.iter().position(|p| *p == name).and_then(|i| u32::try_from(i + 1).ok()),
                column_type: column_type.to_ascii_lowercase(),
                data_type,
                name,
            }
        })
        .collect();
    Ok(Some(TableSchema { columns }))
}

/// The labels of `enum('a','b''c')` or `set(...)`.
pub fn labels(column_type: &str) -> Vec<String> {
    let Some(inner) =
        column_type.find('(').and_then(|start| column_type.rfind(')').map(|end| &column_type[start + 1..end]))
    else {
        return Vec::new();
    };
    let mut labels = Vec::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut label = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    label.push('\'');
                }
                '\'' => break,
                '\\' => {
                    if let Some(next) = chars.next() {
                        label.push(next);
                    }
                }
                c => label.push(c),
            }
        }
        labels.push(label);
    }
    labels
}

/// Records `schemas` at `at`, where a stream begins: a table's first
/// row may come after an `ALTER` the reader has not reached yet, and the
/// schema read live then would be the later one. `all` replaces what the
/// history knows (a stream that skipped ahead); otherwise only tables it
/// never saw are recorded.
pub(crate) fn record_at_start(
    state_dir: &sluice_core::StateDir,
    at: &Position,
    schemas: Vec<(String, TableSchema)>,
    all: bool,
) -> Result<(), SourceError> {
    let mut history = SchemaHistory::open(state_dir.clone())?;
    for (name, schema) in schemas {
        if (all || !history.knows(&name)) && !history.has_entry_at(&name, at) {
            history.record(&name, at, Some(schema))?;
        }
    }
    Ok(())
}

/// A stable fingerprint of a table's columns, as the event's schema version.
pub(crate) fn schema_fingerprint(schema: &TableSchema) -> u32 {
    let mut hash: u32 = 0x811C_9DC5;
    for column in &schema.columns {
        for byte in
            column.name.bytes().chain([0]).chain(column.data_type.bytes()).chain([u8::from(column.unsigned), 0xFF])
        {
            hash ^= u32::from(byte);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{BinlogPos, Position};
    use std::io::Write;

    fn at(offset: u64) -> Position {
        Position::Mysql(BinlogPos { file: "b.000001".into(), offset, seq: 0, gtid_before: None })
    }

    fn schema(name: &str) -> TableSchema {
        TableSchema {
            columns: vec![ColumnInfo {
                name: name.into(),
                data_type: "int".into(),
                unsigned: false,
                labels: vec![],
                charset: None,
                json: false,
                key: true,
                fixed_length: None,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn history_answers_by_position_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let state = sluice_core::StateDir::files(dir.path().join("h"));
        let mut history = SchemaHistory::open(state.clone()).unwrap();
        history.record("db.t", &at(100), Some(schema("a"))).unwrap();
        history.record("db.t", &at(500), Some(schema("b"))).unwrap();
        history.record("db.t", &at(900), None).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("h").join(sluice_core::history::HISTORY_NAME))
            .unwrap()
            .write_all(b"{\"torn")
            .unwrap();
        let history = SchemaHistory::open(state).unwrap();
        assert!(history.at("db.t", &at(50)).is_none());
        assert_eq!(history.at("db.t", &at(100)).unwrap().columns[0].name, "a");
        assert_eq!(history.at("db.t", &at(499)).unwrap().columns[0].name, "a");
        assert_eq!(history.at("db.t", &at(700)).unwrap().columns[0].name, "b");
        assert!(history.at("db.t", &at(901)).is_none(), "dropped");
        assert!(history.has_entry_at("db.t", &at(500)));
    }

    #[test]
    fn enum_labels_parse_with_quotes() {
        assert_eq!(labels("enum('a','b''c','d,e')"), vec!["a", "b'c", "d,e"]);
        assert_eq!(labels("set('x')"), vec!["x"]);
        assert!(labels("int(11)").is_empty());
        assert!(labels("enum(").is_empty());
    }
}
