//! Catalog checks and setup over a plain SQL connection: wal_level,
//! privileges, the publication, the slot, and type lookups.
//!
//! Every failure here is an operator's to fix, so each error says what is
//! wrong and the statement that fixes it.

use sluice_core::SourceError;

use crate::types::{Kind, PgType, builtin};
use crate::wire::{Connection, PgError};
use sluice_config::glob_match;

/// A PgError as a SourceError, transient or not by its class.
pub fn source_error(context: &str, err: PgError) -> SourceError {
    if err.is_transient() {
        SourceError::transient_from(format!("{context}: {err}"), err)
    } else {
        let hint = match (&err, err.code()) {
            (PgError::Tls { .. }, _) => {
                "check ssl_mode and ca_file: the server certificate must be signed by ca_file, and with verify-full name the host"
            }
            (_, Some("28P01" | "28000")) => "check user and password, and pg_hba.conf on the server",
            (_, Some("3D000")) => "check the database name",
            (_, Some("42501")) => "grant the user the privilege the server names",
            _ => "the server's message says what is wrong",
        };
        SourceError::permanent_from(format!("{context}: {err}"), hint, err)
    }
}

fn query_error(err: PgError) -> SourceError {
    source_error("catalog query failed", err)
}

/// Quotes an identifier the way PostgreSQL's quote_ident does.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal.
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

pub async fn check_server(conn: &mut Connection, user: &str) -> Result<u32, SourceError> {
    let wal_level = conn.simple_query("SHOW wal_level").await.map_err(query_error)?;
    let level = wal_level.first("wal_level").unwrap_or_default().to_string();
    if level != "logical" {
        return Err(SourceError::permanent(
            format!("the server's wal_level is {level:?}, and logical replication needs \"logical\""),
            "set wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart the server",
        ));
    }
    let role = conn
        .simple_query("SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user")
        .await
        .map_err(query_error)?;
    if role.first("rolreplication") != Some("t") && role.first("rolsuper") != Some("t") {
        return Err(SourceError::permanent(
            format!("user {user:?} lacks the REPLICATION attribute"),
            format!("run ALTER ROLE {} REPLICATION as a superuser", quote_ident(user)),
        ));
    }
    let version = conn.simple_query("SHOW server_version_num").await.map_err(query_error)?;
    Ok(version.first("server_version_num").and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// The `schema.table` names that match the patterns.
pub async fn matching_tables(conn: &mut Connection, patterns: &[String]) -> Result<Vec<(String, String)>, SourceError> {
    let rows = conn
        .simple_query(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
             AND n.nspname NOT LIKE 'pg\\_toast%' ORDER BY 1, 2",
        )
        .await
        .map_err(query_error)?;
    let tables: Vec<(String, String)> = rows
        .rows
        .iter()
        .filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?)))
        .filter(|(schema, table)| patterns.iter().any(|p| glob_match(p, &format!("{schema}.{table}"))))
        .collect();
    if tables.is_empty() {
        return Err(SourceError::permanent(
            format!("no table matches the patterns {patterns:?}"),
            "check `tables` in the source config; patterns are schema.table with * for any run of characters",
        ));
    }
    Ok(tables)
}

/// Makes sure the publication exists and covers every matched table.
pub async fn ensure_publication(
    conn: &mut Connection,
    name: &str,
    create: bool,
    tables: &[(String, String)],
) -> Result<(), SourceError> {
    let list =
        tables.iter().map(|(s, t)| format!("{}.{}", quote_ident(s), quote_ident(t))).collect::<Vec<_>>().join(", ");
    let existing = conn
        .simple_query(&format!("SELECT puballtables FROM pg_publication WHERE pubname = {}", quote_literal(name)))
        .await
        .map_err(query_error)?;
    if existing.rows.is_empty() {
        if !create {
            return Err(SourceError::permanent(
                format!("publication {name:?} does not exist"),
                format!(
                    "set create_publication: true, or run CREATE PUBLICATION {} FOR TABLE {list}",
                    quote_ident(name)
                ),
            ));
        }
        conn.simple_query(&format!("CREATE PUBLICATION {} FOR TABLE {list}", quote_ident(name)))
            .await
            .map_err(|e| source_error(&format!("cannot create publication {name:?}"), e))?;
        tracing::info!(publication = name, tables = tables.len(), "publication created");
        return Ok(());
    }
    if existing.first("puballtables") == Some("t") {
        return Ok(());
    }
    let covered = conn
        .simple_query(&format!(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = {}",
            quote_literal(name)
        ))
        .await
        .map_err(query_error)?;
    let covered: Vec<(String, String)> =
        covered.rows.iter().filter_map(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?))).collect();
    let missing: Vec<String> = tables
        .iter()
        .filter(|t| !covered.contains(t))
        .map(|(s, t)| format!("{}.{}", quote_ident(s), quote_ident(t)))
        .collect();
    if !missing.is_empty() {
        return Err(SourceError::permanent(
            format!("publication {name:?} does not cover {}", missing.join(", ")),
            format!("run ALTER PUBLICATION {} ADD TABLE {}, or narrow `tables`", quote_ident(name), missing.join(", ")),
        ));
    }
    Ok(())
}

/// What the server knows of the slot.
pub struct SlotState {
    pub exists: bool,
    /// Invalidated: the server removed WAL the slot still needed.
    pub lost: bool,
    /// WAL the server may still write before it invalidates the slot;
    /// `None` when `max_slot_wal_keep_size` does not limit it.
    pub safe_wal_bytes: Option<i64>,
}

impl SlotState {
    /// The error for a lost slot, where nothing may stream from it.
    pub fn lost_error(name: &str) -> SourceError {
        SourceError::permanent(
            format!(
                "replication slot {name:?} was invalidated: the server removed WAL it still needed, so changes were lost"
            ),
            "drop the slot, reset this pipeline's checkpoints with `sluice checkpoints reset`, and take a new snapshot; or set snapshot.mode: when_needed to re-read the tables and go on",
        )
    }
}

pub async fn slot_state(conn: &mut Connection, name: &str, database: &str) -> Result<SlotState, SourceError> {
    let rows = conn
        .simple_query(&format!(
            "SELECT plugin, slot_type, database, confirmed_flush_lsn, wal_status, safe_wal_size FROM pg_replication_slots WHERE slot_name = {}",
            quote_literal(name)
        ))
        .await
        .map_err(query_error)?;
    if rows.rows.is_empty() {
        return Ok(SlotState { exists: false, lost: false, safe_wal_bytes: None });
    }
    let plugin = rows.first("plugin").unwrap_or_default();
    let slot_database = rows.first("database").unwrap_or_default();
    if rows.first("slot_type") != Some("logical") || plugin != "pgoutput" || slot_database != database {
        return Err(SourceError::permanent(
            format!(
                "replication slot {name:?} exists but is not a pgoutput slot of database {database:?} (plugin {plugin:?}, database {slot_database:?})"
            ),
            "give this source its own slot name with `slot:`",
        ));
    }
    Ok(SlotState {
        exists: true,
        lost: rows.first("wal_status") == Some("lost"),
        safe_wal_bytes: rows.first("safe_wal_size").and_then(|v| v.parse().ok()),
    })
}

/// Resolves non-builtin type OIDs: domains to their base type, arrays to
/// their element type, enums and everything else to text.
pub async fn resolve_types(conn: &mut Connection, oids: &[u32]) -> Result<Vec<(u32, PgType)>, SourceError> {
    let mut resolved = Vec::new();
    for oid in oids {
        resolved.push((*oid, resolve(conn, *oid, 0).await?));
    }
    Ok(resolved)
}

/// Domains of arrays of domains nest at most this deep.
const MAX_TYPE_DEPTH: usize = 8;

async fn resolve(conn: &mut Connection, oid: u32, depth: usize) -> Result<PgType, SourceError> {
    if let Some(ty) = builtin(oid) {
        return Ok(ty);
    }
    if depth >= MAX_TYPE_DEPTH {
        return Ok(PgType::Scalar(Kind::Text));
    }
    let rows = conn
        .simple_query(&format!(
            "SELECT typtype, typelem, typbasetype, typcategory, typdelim FROM pg_type WHERE oid = {oid}"
        ))
        .await
        .map_err(query_error)?;
    let field = |name: &str| rows.first(name).unwrap_or_default().to_string();
    match (field("typtype").as_str(), field("typcategory").as_str()) {
        ("d", _) => {
            let base = field("typbasetype").parse().unwrap_or(0);
            Box::pin(resolve(conn, base, depth + 1)).await
        }
        ("b", "A") => {
            let element = field("typelem").parse().unwrap_or(0);
            let delimiter = field("typdelim").chars().next().unwrap_or(',');
            let element = Box::pin(resolve(conn, element, depth + 1)).await?;
            Ok(PgType::Array { element: Box::new(element), delimiter })
        }
        _ => Ok(PgType::Scalar(Kind::Text)),
    }
}
