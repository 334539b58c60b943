//! The `postgres` sink: exactly-once into PostgreSQL tables.
//!
//! Each batch is one transaction of the target: its changes and the sink's
//! row in `<checkpoint_schema>.sluice_checkpoints` commit together, so
//! after a crash at any point the target holds either all of a batch or
//! none of it, and `open` reads back the position it holds. In `apply`
//! mode the target tables mirror the source tables by key: inserted rows
//! go in by COPY (an upsert if a key is taken), updates through COPY into
//! a session's temporary table and one `INSERT … ON CONFLICT`, deletes by
//! one `DELETE … USING`, each per run of changes (see
//! [`crate::db::plan`]); in `changelog` mode every change is a row keyed
//! by its event id.
//!
//! A row the target refuses (a constraint, a value out of range) fails its
//! whole statement. The batch is then written again event by event, each
//! behind a savepoint, and the event the target refuses goes to the dead
//! letter queue with the server's error; the rest of the batch is written.

pub mod config;
#[cfg(feature = "postgres")]
mod preflight;
#[cfg(feature = "postgres")]
mod sink;
#[cfg(feature = "postgres")]
mod tables;
#[cfg(feature = "postgres")]
mod text;
#[cfg(feature = "postgres")]
mod types;

pub use config::*;
#[cfg(feature = "postgres")]
pub use sink::PostgresSink;

#[cfg(feature = "postgres")]
pub fn build(config: &PostgresSinkConfig, context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(PostgresSink::new(config.clone(), &context.source_id))
}

/// A permanent error of this sink, naming it.
#[cfg(feature = "postgres")]
fn fail(config: &PostgresSinkConfig, detail: String, hint: impl Into<String>) -> sluice_core::SinkError {
    sluice_core::SinkError::permanent(format!("postgres sink {:?}: {detail}", config.id), hint)
}

/// A target error while `doing` something. Missing objects are transient:
/// the table cache is rebuilt when the batch is written again, so a
/// target table dropped under the sink is created again.
#[cfg(feature = "postgres")]
fn db_error(e: &sluice_pgwire::PgError, doing: &str) -> sluice_core::SinkError {
    use sluice_core::SinkError;
    let detail = format!("{doing}: {e}");
    match e.code() {
        Some("42501") => SinkError::permanent(
            detail,
            "grant the sink's user the privilege the message names (USAGE and CREATE on the schema, INSERT, UPDATE, DELETE and TRUNCATE on the table), then restart",
        ),
        Some("42P01" | "42703") => SinkError::transient(detail),
        // Another session created the same schema or table at the same
        // moment (`IF NOT EXISTS` is not atomic): the retry finds it.
        // The table's row type collides in pg_type first (42710).
        Some("23505" | "42710" | "42P06" | "42P07") => SinkError::transient(detail),
        Some(code) if !e.is_transient() && !code.is_empty() => {
            SinkError::permanent(detail, "fix the target so it can take the change, then restart the pipeline")
        }
        _ if matches!(e, sluice_pgwire::PgError::Tls { .. }) => {
            SinkError::permanent(detail, "check ssl_mode and ca_file against the server's certificate")
        }
        _ => SinkError::transient(detail),
    }
}

/// Errors one row causes: data exceptions, constraint violations, a row
/// too large for an index.
#[cfg(feature = "postgres")]
fn is_row_error(e: &sluice_pgwire::PgError) -> bool {
    e.code().is_some_and(|code| code.starts_with("22") || code.starts_with("23") || code == "54000")
}
