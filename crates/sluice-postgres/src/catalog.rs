//! Catalog checks and setup over a plain SQL connection: wal_level,
//! privileges, the publication, the slot, and type lookups.
//!
//! Every failure here is an operator's to fix, so each error says what is
//! wrong and the statement that fixes it.

use sluice_config::{KeylessTables, PostgresConfig};
use sluice_core::SourceError;
use tracing::warn;

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

pub(crate) fn query_error(err: PgError) -> SourceError {
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

/// Refuses the settings the server's major cannot honour, instead of
/// running without them: pgoutput sends logical decoding messages (which
/// carry `messages`, the heartbeats and the watermarks of incremental
/// snapshots) only from PostgreSQL 14 on.
pub fn check_features(config: &PostgresConfig, version: u32) -> Result<(), SourceError> {
    use sluice_config::SnapshotMode;
    let needs_14 = if config.messages == Some(true) {
        Some("messages: true")
    } else if config.heartbeat_secs.is_some() {
        Some("heartbeat_secs")
    } else if config.snapshot.mode == SnapshotMode::Always {
        Some("snapshot.mode: always (it re-reads tables with incremental snapshots)")
    } else if config.snapshot.mode == SnapshotMode::WhenNeeded {
        Some("snapshot.mode: when_needed (it re-reads tables with incremental snapshots)")
    } else {
        None
    };
    if config.failover_slot == Some(true) && version < 170_000 {
        return Err(SourceError::permanent(
            format!("failover_slot: true needs PostgreSQL 17 or later (the server runs {version})"),
            "remove failover_slot, or upgrade the server; before 17 a failover loses the slot, which the source detects",
        ));
    }
    match needs_14 {
        Some(setting) if version < 140_000 => Err(SourceError::permanent(
            format!(
                "{setting} needs PostgreSQL 14 or later (the server runs {version}): pgoutput sends logical decoding messages from 14 on"
            ),
            "remove the setting (snapshot.mode: initial takes the place of always and when_needed), or upgrade the server",
        )),
        _ => Ok(()),
    }
}

/// A table the patterns reach, as the catalog shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched {
    pub schema: String,
    pub table: String,
    /// A partitioned table: its rows live in its partitions.
    pub partitioned: bool,
    /// The root of its partition tree (`schema.table`), for a partition.
    /// Its changes go by this name.
    pub root: Option<String>,
    /// No primary key, and a replica identity that names no row.
    pub keyless: bool,
}

impl Matched {
    pub fn name(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// The name its changes go by: the root's for a partition.
    pub fn event_name(&self) -> String {
        self.root.clone().unwrap_or_else(|| self.name())
    }

    pub(crate) fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.table))
    }
}

/// The tables the patterns match, and every partition of a matched
/// partitioned table, whatever its own name: its changes are the root's.
pub async fn matching_tables(conn: &mut Connection, patterns: &[String]) -> Result<Vec<Matched>, SourceError> {
    let rows = conn
        .simple_query(
            "SELECT n.nspname, c.relname, c.relkind, rn.nspname AS root_schema, r.relname AS root_table, \
               (c.relkind = 'r' AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) \
                 AND (c.relreplident = 'n' OR (c.relreplident = 'd') \
                   OR (c.relreplident = 'i' AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)))) AS keyless \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_class r ON c.relispartition AND r.oid = pg_partition_root(c.oid) \
             LEFT JOIN pg_namespace rn ON rn.oid = r.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
             AND n.nspname NOT LIKE 'pg\\_toast%' ORDER BY 1, 2",
        )
        .await
        .map_err(query_error)?;
    let field = |row: &[Option<String>], i: usize| row.get(i).cloned().flatten();
    let tables: Vec<Matched> = rows
        .rows
        .iter()
        .filter_map(|r| {
            let root = field(r, 3).zip(field(r, 4)).map(|(schema, table)| format!("{schema}.{table}"));
            Some(Matched {
                schema: field(r, 0)?,
                table: field(r, 1)?,
                partitioned: field(r, 2).as_deref() == Some("p"),
                root,
                keyless: field(r, 5).as_deref() == Some("t"),
            })
        })
        .filter(|m| patterns.iter().any(|p| glob_match(p, &m.name()) || glob_match(p, &m.event_name())))
        .collect();
    if tables.is_empty() {
        return Err(SourceError::permanent(
            format!("no table matches the patterns {patterns:?}"),
            "check `tables` in the source config; patterns are schema.table with * for any run of characters",
        ));
    }
    Ok(tables)
}

/// The tables a publication must hold to capture `tables`: a partition
/// is published through its root when the root is among them.
pub fn published(tables: &[Matched]) -> Vec<&Matched> {
    tables.iter().filter(|m| m.root.as_ref().is_none_or(|root| !tables.iter().any(|t| t.name() == *root))).collect()
}

/// A published table holds a keyless one: itself, or one of its partitions.
pub(crate) fn holds_keyless(table: &Matched, tables: &[Matched]) -> bool {
    table.keyless || tables.iter().any(|t| t.keyless && t.root.as_deref() == Some(table.name().as_str()))
}

/// Applies `keyless_tables` to the matched tables: drops the keyless ones
/// (with a warning), marks them for the inserts-only publication, or sets
/// their replica identity to FULL. Returns the tables to capture and, for
/// `inserts_only`, the published tables that go to that publication.
pub async fn settle_keyless(
    conn: &mut Connection,
    tables: Vec<Matched>,
    choice: KeylessTables,
) -> Result<(Vec<Matched>, Vec<String>), SourceError> {
    let keyless: Vec<String> = tables.iter().filter(|t| t.keyless).map(Matched::name).collect();
    if keyless.is_empty() {
        return Ok((tables, Vec::new()));
    }
    match choice {
        KeylessTables::Skip => {
            warn!(
                tables = keyless.join(", "),
                "left out of capture: these tables have no primary key and no replica identity, and PostgreSQL refuses every UPDATE and DELETE of a table in a publication of updates and deletes without one; add a primary key, or run ALTER TABLE … REPLICA IDENTITY FULL, or set keyless_tables: inserts_only or set_replica_identity_full"
            );
            let kept: Vec<Matched> = tables.iter().filter(|t| !holds_keyless(t, &tables)).cloned().collect();
            if kept.is_empty() {
                return Err(SourceError::permanent(
                    format!(
                        "every matched table is keyless (no primary key, no replica identity): {}",
                        keyless.join(", ")
                    ),
                    "add a primary key, or run ALTER TABLE … REPLICA IDENTITY FULL, or set keyless_tables: inserts_only or set_replica_identity_full",
                ));
            }
            Ok((kept, Vec::new()))
        }
        KeylessTables::InsertsOnly => {
            warn!(
                tables = keyless.join(", "),
                "keyless_tables: inserts_only: only inserts and truncates of these tables are captured; their updates and deletes are not"
            );
            let inserts =
                published(&tables).into_iter().filter(|t| holds_keyless(t, &tables)).map(Matched::name).collect();
            Ok((tables, inserts))
        }
        KeylessTables::SetReplicaIdentityFull => {
            for table in tables.iter().filter(|t| t.keyless) {
                conn.simple_query(&format!("ALTER TABLE {} REPLICA IDENTITY FULL", table.quoted()))
                    .await
                    .map_err(|e| source_error(&format!("cannot set the replica identity of {}", table.name()), e))?;
                warn!(
                    table = table.name(),
                    "replica identity set to FULL (keyless_tables: set_replica_identity_full): the server now logs the whole old row of every update and delete"
                );
            }
            let tables = tables.into_iter().map(|t| Matched { keyless: false, ..t }).collect();
            Ok((tables, Vec::new()))
        }
    }
}

/// Makes sure the publication exists and covers `tables`. One Sluice
/// creates publishes partitions through their root, so their changes
/// carry the root's name (and a table and its partition never both).
/// With `inserts_only`, those tables go to a publication of inserts and
/// truncates alone.
pub async fn ensure_publication(
    conn: &mut Connection,
    name: &str,
    create: bool,
    tables: &[&Matched],
    inserts_only: bool,
    later: bool,
) -> Result<(), SourceError> {
    if tables.is_empty() {
        return Ok(());
    }
    let list = tables.iter().map(|t| t.quoted()).collect::<Vec<_>>().join(", ");
    let existing = conn
        .simple_query(&format!("SELECT puballtables FROM pg_publication WHERE pubname = {}", quote_literal(name)))
        .await
        .map_err(query_error)?;
    let options = if inserts_only {
        "publish_via_partition_root = true, publish = 'insert, truncate'"
    } else {
        "publish_via_partition_root = true"
    };
    if existing.rows.is_empty() {
        if !create {
            return Err(SourceError::permanent(
                format!("publication {name:?} does not exist"),
                format!(
                    "set create_publication: true, or run CREATE PUBLICATION {} FOR TABLE {list} WITH ({options})",
                    quote_ident(name)
                ),
            ));
        }
        conn.simple_query(&format!("CREATE PUBLICATION {} FOR TABLE {list} WITH ({options})", quote_ident(name)))
            .await
            .map_err(|e| source_error(&format!("cannot create publication {name:?}"), e))?;
        tracing::info!(publication = name, tables = tables.len(), "publication created");
        return Ok(());
    }
    if existing.first("puballtables") == Some("t") {
        return Ok(());
    }
    let missing = uncovered(conn, name, tables).await?;
    if !missing.is_empty() && later {
        // The reader publishes them, with their rows (new_tables.rs).
        tracing::info!(
            publication = name,
            tables = missing.join(", "),
            "the publication lacks tables the patterns match; they join once streaming starts"
        );
        return Ok(());
    }
    if !missing.is_empty() {
        return Err(SourceError::permanent(
            format!("publication {name:?} does not cover {}", missing.join(", ")),
            format!("run ALTER PUBLICATION {} ADD TABLE {}, or narrow `tables`", quote_ident(name), missing.join(", ")),
        ));
    }
    Ok(())
}

/// The quoted names of `tables` the existing publication `name` does not
/// publish.
pub async fn uncovered(conn: &mut Connection, name: &str, tables: &[&Matched]) -> Result<Vec<String>, SourceError> {
    // pg_publication_tables lists a partitioned table, or its leaves,
    // depending on publish_via_partition_root: a listed leaf covers its root.
    let covered = conn
        .simple_query(&format!(
            "SELECT pt.schemaname, pt.tablename FROM pg_publication_tables pt WHERE pt.pubname = {name} \
             UNION SELECT rn.nspname, r.relname FROM pg_publication_tables pt \
             JOIN pg_namespace n ON n.nspname = pt.schemaname \
             JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename \
             JOIN pg_class r ON r.oid = pg_partition_root(c.oid) JOIN pg_namespace rn ON rn.oid = r.relnamespace \
             WHERE pt.pubname = {name}",
            name = quote_literal(name)
        ))
        .await
        .map_err(query_error)?;
    let covered: Vec<String> =
        covered.rows.iter().filter_map(|r| Some(format!("{}.{}", r.first()?.clone()?, r.get(1)?.clone()?))).collect();
    Ok(tables
        .iter()
        .filter(|t| !covered.contains(&t.name()) && t.root.as_ref().is_none_or(|root| !covered.contains(root)))
        .map(|t| t.quoted())
        .collect())
}

/// What the stream needs to know of a relation beyond its Relation
/// message: the root of its partition tree, and the columns that name a
/// row, from the catalog as it is now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RelationMeta {
    /// The root of its partition tree (schema, table), for a partition.
    pub root: Option<(String, String)>,
    /// `None` when nothing names a row but the whole row.
    pub key: Option<Vec<String>>,
    /// The primary key's columns; empty for a table without one.
    pub primary: Vec<String>,
    pub columns: Vec<crate::schema::CatalogColumn>,
}

pub async fn relation_meta(conn: &mut Connection, oid: u32) -> Result<RelationMeta, SourceError> {
    let root = conn
        .simple_query(&format!(
            "SELECT n.nspname, r.relname FROM pg_class c JOIN pg_class r ON r.oid = pg_partition_root(c.oid) \
             JOIN pg_namespace n ON n.oid = r.relnamespace WHERE c.oid = {oid} AND c.relispartition"
        ))
        .await
        .map_err(query_error)?;
    let root = root.rows.first().and_then(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?)));
    let columns = |flag: &str| {
        format!(
            "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) AS k(attnum) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = {oid} AND i.{flag} ORDER BY a.attnum"
        )
    };
    let names = |rows: crate::wire::Rows| -> Vec<String> {
        rows.rows.iter().filter_map(|r| r.first().cloned().flatten()).collect()
    };
    let primary = names(conn.simple_query(&columns("indisprimary")).await.map_err(query_error)?);
    let identity = names(conn.simple_query(&columns("indisreplident")).await.map_err(query_error)?);
    let replident = conn
        .simple_query(&format!("SELECT relreplident FROM pg_class WHERE oid = {oid}"))
        .await
        .map_err(query_error)?;
    let replident = replident.first("relreplident").and_then(|r| r.bytes().next()).unwrap_or(b'd');
    let columns = crate::schema::catalog_columns(conn, oid).await?;
    // Debezium orders a key's fields as the constraint declares them,
    // which the event key (in column order) does not.
    let declared = names(
        conn.simple_query(&format!(
            "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = {oid} AND i.indisprimary ORDER BY k.n"
        ))
        .await
        .map_err(query_error)?,
    );
    Ok(RelationMeta { root, key: event_key(replident, primary, identity), primary: declared, columns })
}

/// The columns that name a row in its events: the primary key, unless the
/// replica identity is an index that does not hold it (the server then
/// sends only that index's columns for a delete, so only they can name
/// the row every time); `None` for a table with neither, whose rows only
/// their whole image names.
pub fn event_key(replident: u8, primary: Vec<String>, identity_index: Vec<String>) -> Option<Vec<String>> {
    match replident {
        b'i' if !primary.is_empty() && primary.iter().all(|c| identity_index.contains(c)) => Some(primary),
        b'i' if !identity_index.is_empty() => Some(identity_index),
        _ if !primary.is_empty() => Some(primary),
        _ => None,
    }
}

/// What the server knows of the slot.
pub struct SlotState {
    pub exists: bool,
    /// Invalidated: the server removed WAL the slot still needed.
    pub lost: bool,
    /// WAL the server may still write before it invalidates the slot;
    /// `None` when `max_slot_wal_keep_size` does not limit it.
    pub safe_wal_bytes: Option<i64>,
    /// The position the slot's client last confirmed.
    pub confirmed: Option<sluice_core::Lsn>,
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
        return Ok(SlotState { exists: false, lost: false, safe_wal_bytes: None, confirmed: None });
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
        confirmed: rows.first("confirmed_flush_lsn").and_then(|v| v.parse().ok()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_key_is_the_primary_key_unless_deletes_cannot_carry_it() {
        assert_eq!(event_key(b'f', names(&["id"]), vec![]), Some(names(&["id"])));
        assert_eq!(event_key(b'd', names(&["a", "b"]), names(&["a", "b"])), Some(names(&["a", "b"])));
        assert_eq!(event_key(b'i', names(&["id"]), names(&["id", "email"])), Some(names(&["id"])));
        assert_eq!(event_key(b'i', names(&["id"]), names(&["email"])), Some(names(&["email"])));
        assert_eq!(event_key(b'f', vec![], vec![]), None);
        assert_eq!(event_key(b'd', vec![], vec![]), None);
    }

    fn table(name: &str, root: Option<&str>, partitioned: bool) -> Matched {
        let (schema, table) = name.split_once('.').unwrap();
        Matched {
            schema: schema.into(),
            table: table.into(),
            partitioned,
            root: root.map(str::to_string),
            keyless: false,
        }
    }

    #[test]
    fn a_partition_is_published_through_its_root_when_the_root_is_captured() {
        let tables = vec![
            table("public.meas", None, true),
            table("public.meas_2024", Some("public.meas"), false),
            table("public.other_p1", Some("public.other"), false),
            table("public.plain", None, false),
        ];
        let published: Vec<String> = published(&tables).iter().map(|t| t.name()).collect();
        assert_eq!(published, ["public.meas", "public.other_p1", "public.plain"]);
        assert_eq!(tables[1].event_name(), "public.meas");
        assert_eq!(tables[2].event_name(), "public.other");
    }
}
