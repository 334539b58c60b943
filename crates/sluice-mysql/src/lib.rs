//! The MySQL / MariaDB source: row-based binlog replication. See
//! [`source`] for the data flow, positions and safety checks.

mod errors;
pub mod gtid;
pub mod incremental;
pub mod schema;
pub mod snapshot;
mod source;
pub mod values;

pub use source::{MysqlSource, ddl_target};
