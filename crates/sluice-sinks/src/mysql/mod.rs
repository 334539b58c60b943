//! The `mysql` sink: exactly-once into MySQL and MariaDB (InnoDB) tables.
//!
//! As the `postgres` sink, each batch is one transaction of the target
//! that also moves the sink's row in `<checkpoint_schema>.sluice_checkpoints`,
//! and `open` reads that row back. Rows go in as multi-row `INSERT … ON
//! DUPLICATE KEY UPDATE` and `DELETE … WHERE (key) IN (…)` statements,
//! one per run of changes (see [`crate::db::plan`]); a truncate is a
//! `DELETE` of every row, since `TRUNCATE` would commit the transaction.
//! Table changes run between batches for the same reason (see [`tables`]).

pub mod config;
#[cfg(feature = "mysql")]
mod preflight;
#[cfg(feature = "mysql")]
mod sink;
#[cfg(feature = "mysql")]
mod tables;
#[cfg(feature = "mysql")]
mod text;
#[cfg(feature = "mysql")]
mod types;

pub use config::*;
#[cfg(feature = "mysql")]
pub use sink::MysqlSink;

#[cfg(feature = "mysql")]
pub fn build(config: &MysqlSinkConfig, context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(MysqlSink::new(config.clone(), &context.source_id))
}

/// How many `sluice_checkpoints` tables `database` holds (0 or 1).
#[cfg(feature = "mysql")]
fn checkpoint_table_count(database: &str) -> String {
    format!(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = {} AND TABLE_NAME = 'sluice_checkpoints'",
        text::quoted(database)
    )
}

#[cfg(feature = "mysql")]
fn fail(config: &MysqlSinkConfig, detail: String, hint: impl Into<String>) -> sluice_core::SinkError {
    sluice_core::SinkError::permanent(format!("mysql sink {:?}: {detail}", config.id), hint)
}

/// A target error while `doing` something.
#[cfg(feature = "mysql")]
fn my_error(e: mysql_async::Error, doing: &str) -> sluice_core::SinkError {
    use sluice_core::SinkError;
    let detail = format!("{doing}: {e}");
    match &e {
        mysql_async::Error::Server(server) => match server.code {
            // lock wait timeout, deadlock, too many connections, shutdown, gone away, lost
            1205 | 1213 | 1040 | 1053 | 2006 | 2013 => SinkError::transient(detail),
            // table or column missing: the cache is rebuilt on the retry
            1146 | 1054 => SinkError::transient(detail),
            1044 | 1142 | 1143 | 1227 => SinkError::permanent(
                detail,
                "grant the sink's user the privilege the message names (CREATE and ALTER on the target databases, SELECT, INSERT, UPDATE and DELETE on the tables), then restart",
            ),
            1045 | 1698 | 1130 => SinkError::permanent(detail, "check user and password, and that the user may connect from this host"),
            _ => SinkError::permanent(detail, "fix the target so it can take the change, then restart the pipeline"),
        },
        mysql_async::Error::Io(mysql_async::IoError::Tls(_)) => {
            SinkError::permanent(detail, "check ssl_mode and ca_file against the server's certificate")
        }
        _ => SinkError::transient(detail),
    }
}

/// Errors one row causes: bad values, constraints, duplicate keys.
#[cfg(feature = "mysql")]
fn is_row_error(e: &mysql_async::Error) -> bool {
    match e {
        mysql_async::Error::Server(server) => {
            server.state.starts_with("22")
                || server.state.starts_with("23")
                || matches!(server.code, 1265 | 1292 | 1366 | 1367 | 1411 | 1690 | 3140 | 3819 | 4025)
        }
        _ => false,
    }
}
