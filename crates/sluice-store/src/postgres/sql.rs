//! The PostgreSQL store's tables and the text of its statements.

use sluice_core::StoreError;

use super::session::{CallError, Session};

/// The layout of the store's tables that this Sluice writes. A store
/// marked with a higher one was written by a newer Sluice.
pub(super) const STORE_VERSION: i64 = 1;

/// A string literal (with `standard_conforming_strings` on). The simple
/// query protocol ends a statement at a NUL, so text with one is refused.
pub(super) fn literal(text: &str) -> Result<String, CallError> {
    if text.contains('\0') {
        return Err(CallError::Fatal(StoreError::Io {
            path: String::new(),
            detail: format!(
                "{:?} holds a NUL character, which PostgreSQL text cannot",
                text.chars().take(80).collect::<String>()
            ),
            cause: None,
        }));
    }
    Ok(format!("'{}'", text.replace('\'', "''")))
}

/// An array of string literals, for `= ANY(...)`.
pub(super) fn array(items: impl IntoIterator<Item = String>) -> Result<String, CallError> {
    let items: Vec<String> = items.into_iter().map(|i| literal(&i)).collect::<Result<_, _>>()?;
    Ok(format!("ARRAY[{}]::text[]", items.join(",")))
}

pub(super) fn bytes(value: &[u8]) -> String {
    format!("decode('{}', 'hex')", hex::encode(value))
}

/// Creates the schema and tables if they are missing, under a lock so two
/// instances starting at once do not race, and checks the layout version.
pub(super) fn prepare(session: &mut Session) -> Result<(), CallError> {
    let s = quote_ident(&session.settings.schema);
    let key = literal(&session.settings.schema)?;
    let lock = super::session::LOCK_CLASS;
    session.query(&format!(
        "BEGIN;
         SELECT pg_advisory_xact_lock({lock} + 1, hashtext({key}));
         CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {s}.store_version (version bigint NOT NULL);
         CREATE TABLE IF NOT EXISTS {s}.checkpoints (key text PRIMARY KEY, position text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE IF NOT EXISTS {s}.generations (source text PRIMARY KEY, generation bigint NOT NULL);
         CREATE TABLE IF NOT EXISTS {s}.dead_letters (key text PRIMARY KEY, recorded_at_us bigint NOT NULL, letter text NOT NULL);
         CREATE TABLE IF NOT EXISTS {s}.state (name text PRIMARY KEY, value bytea NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE IF NOT EXISTS {s}.members (instance text PRIMARY KEY, started_at timestamptz NOT NULL, alive_until timestamptz NOT NULL);
         CREATE TABLE IF NOT EXISTS {s}.leases (pipeline text PRIMARY KEY, owner text NOT NULL, epoch bigint NOT NULL, config text NOT NULL, acquired_at timestamptz NOT NULL, expires_at timestamptz NOT NULL);
         INSERT INTO {s}.store_version SELECT {STORE_VERSION} WHERE NOT EXISTS (SELECT 1 FROM {s}.store_version);
         COMMIT"
    ))?;
    let rows = session.query(&format!("SELECT max(version) AS version FROM {s}.store_version"))?;
    let version: i64 = rows.first("version").and_then(|v| v.parse().ok()).unwrap_or(0);
    if version > STORE_VERSION {
        return Err(CallError::Fatal(StoreError::Io {
            path: String::new(),
            detail: format!(
                "schema {:?} holds a store of layout {version}, written by a newer Sluice (this one writes layout {STORE_VERSION}); upgrade this instance, or give it another store.config.schema",
                session.settings.schema
            ),
            cause: None,
        }));
    }
    Ok(())
}

pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
