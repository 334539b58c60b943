//! The MySQL / MariaDB source: row-based binlog replication. See
//! [`source`] for the data flow, positions and safety checks.

mod clock;
mod conn;
pub mod ddl;
mod declared;
mod errors;
pub mod gtid;
pub mod incremental;
pub mod preflight;
mod reader;
pub mod schema;
pub mod snapshot;
mod source;
mod start;
pub mod text_values;
pub mod values;

pub use source::MysqlSource;
