//! What a source knows of a table's columns when it decodes an event, and
//! where in the source's log the event came from.
//!
//! Events carry these so that an output format with typed schemas (the
//! Debezium envelope, Avro) can describe a column as the database declared
//! it (`numeric(12,2)`, `timestamp(3)`), which a value alone cannot tell.

use crate::tx_place::TxPlace;
use std::sync::Arc;

use crate::value::Value;

/// The declared shape of a column's type, as far as formats need it.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnType {
    Bool,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    /// `numeric(p, s)`; both `None` for a `numeric` without a type modifier.
    Decimal {
        precision: Option<u32>,
        scale: Option<u32>,
    },
    /// Character data; `length` for `varchar(n)` and `char(n)`.
    Text {
        length: Option<u32>,
    },
    Bytes,
    Json,
    Uuid,
    Date,
    /// Time of day; `precision` is the count of fraction digits declared.
    Time {
        precision: u32,
    },
    TimeTz {
        precision: u32,
    },
    Timestamp {
        precision: u32,
    },
    TimestampTz {
        precision: u32,
    },
    Interval,
    /// An enum type and its labels in declaration order.
    Enum {
        labels: Vec<Arc<str>>,
    },
    /// A MySQL `SET` and its labels; a value is the chosen labels, comma-separated.
    Set {
        labels: Vec<Arc<str>>,
    },
    /// A bit string of `length` bits (`bit(n)`, n > 1).
    Bits {
        length: u32,
    },
    /// A MySQL `YEAR`.
    Year,
    /// PostgreSQL's `xml`, carried as its text.
    Xml,
    /// PostgreSQL's `money`, carried as its text (`$1,234.50`).
    Money,
    Array(Box<ColumnType>),
    /// Any other type, carried as its text form.
    Other,
}

/// One column of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnSchema {
    pub name: Arc<str>,
    /// The database's own name for the type (`int4`, `varchar`, an enum's name).
    pub type_name: Arc<str>,
    pub ty: ColumnType,
    /// False for a `NOT NULL` column.
    pub nullable: bool,
    /// The column's default when it is a constant.
    pub default: Option<Value>,
}

/// A table's columns in order, and which of them form the primary key.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TableSchema {
    pub columns: Vec<ColumnSchema>,
    /// Indexes into `columns`; empty for a table without a primary key.
    pub primary_key: Vec<usize>,
}

impl TableSchema {
    pub fn column(&self, name: &str) -> Option<&ColumnSchema> {
        self.columns.iter().find(|c| &*c.name == name)
    }
}

/// Where a snapshot row falls, as Debezium's `source.snapshot` tells it.
/// The marks of an initial snapshot rank as Debezium resolves a row that
/// is several at once (the only row of the last table is `Last`): the
/// greater wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum SnapshotMark {
    /// Any other row of an initial snapshot.
    #[default]
    Row,
    FirstInTable,
    LastInTable,
    /// The first row of the snapshot.
    First,
    /// The last row of the snapshot.
    Last,
    /// A row read by an incremental snapshot, between log events.
    Incremental,
}

/// Where in the source's log an event was read, beyond its position.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Origin {
    /// Nothing more than the position: generators.
    #[default]
    None,
    /// A row read by a snapshot, and where it falls in it.
    Snapshot(SnapshotMark),
    /// A PostgreSQL change: the LSN of its own WAL record, and the commit
    /// LSN of the transaction the stream finished before it.
    /// `tx` is its place in its transaction (none outside one).
    Postgres { lsn: u64, last_commit_lsn: Option<u64>, tx: Option<TxPlace> },
    /// A MySQL or MariaDB row: the binlog file and offset of its row
    /// event, and the server and thread that wrote it.
    /// `mariadb` tells MariaDB (whose Debezium connector is `mariadb`) from MySQL.
    Mysql {
        server_id: u32,
        file: Arc<str>,
        pos: u64,
        row: u32,
        thread: Option<u32>,
        gtid: Option<Arc<str>>,
        mariadb: bool,
        tx: Option<TxPlace>,
    },
}
