//! Choosing the server to read. With `failover_hosts`, every start and
//! every reconnect reads from the first of the source's hosts that is not
//! in recovery, so after a standby is promoted the pipeline follows it and
//! resumes from its slot (a failover slot the standby kept in step, from
//! PostgreSQL 17). Until one answers as a primary, the start fails as
//! transient and is retried with backoff.
//!
//! Without `failover_hosts`, `host` may be a standby (PostgreSQL 16+
//! decodes on a standby): [`check_standby`] says what that needs.

use sluice_config::{PostgresConfig, SnapshotMode};
use sluice_core::SourceError;
use tracing::{info, warn};

use crate::catalog::{query_error, source_error};
use crate::wire::{ConnectParams, Connection};

/// The connection settings of the first host that is a primary; `current`
/// itself when the source names only one host.
pub(crate) async fn primary(config: &PostgresConfig, current: &ConnectParams) -> Result<ConnectParams, SourceError> {
    let hosts = config.hosts();
    if hosts.len() == 1 {
        return Ok(current.clone());
    }
    let mut seen = Vec::with_capacity(hosts.len());
    for (host, port) in hosts {
        let params = ConnectParams { host, port, ..current.clone() };
        let state = match Connection::connect(&params, false).await {
            Ok(mut conn) => {
                let answer = conn.simple_query("SELECT pg_is_in_recovery()").await;
                conn.close().await;
                match answer {
                    Ok(rows) if rows.first("pg_is_in_recovery") == Some("f") => {
                        if params.host != current.host || params.port != current.port {
                            info!(server = %params.addr(), "reading from this host: it is the primary");
                        }
                        return Ok(params);
                    }
                    Ok(_) => "a standby (in recovery)".to_string(),
                    Err(e) => source_error("asking whether it is in recovery", e).to_string(),
                }
            }
            Err(e) => source_error("cannot connect", e).to_string(),
        };
        seen.push(format!("{}: {state}", params.addr()));
    }
    Err(SourceError::transient(format!(
        "none of the source's hosts is a primary ({}); retrying until one is promoted",
        seen.join("; ")
    )))
}

/// Whether the server is a standby, after checking that a standby can
/// serve this source: logical decoding there needs PostgreSQL 16, and
/// `hot_standby_feedback`, or the primary removes catalog rows the slot
/// still needs and the standby invalidates the slot; and nothing of the
/// source may write (a standby is read-only).
pub(crate) async fn check_standby(
    conn: &mut Connection,
    config: &PostgresConfig,
    version: u32,
) -> Result<bool, SourceError> {
    let rows = conn
        .simple_query(
            "SELECT pg_is_in_recovery() AS standby, current_setting('hot_standby_feedback') AS feedback, \
             current_setting('primary_slot_name') AS primary_slot",
        )
        .await
        .map_err(query_error)?;
    if rows.first("standby") != Some("t") {
        return Ok(false);
    }
    if version < 160_000 {
        return Err(SourceError::permanent(
            format!(
                "{}:{} is a standby, and logical decoding on a standby needs PostgreSQL 16 or later (it runs {version})",
                config.host, config.port
            ),
            "point host at the primary, or upgrade the servers",
        ));
    }
    if rows.first("feedback") != Some("on") {
        return Err(SourceError::permanent(
            "the standby runs with hot_standby_feedback off: the primary would remove catalog rows the slot needs, and the standby would invalidate the slot",
            "set hot_standby_feedback = on on the standby (and primary_slot_name, so the primary keeps the feedback across reconnects), then reload it",
        ));
    }
    if config.heartbeat_secs.is_some() {
        return Err(SourceError::permanent(
            "heartbeat_secs writes a message to the server, and a standby is read-only",
            "remove heartbeat_secs: on a standby the slot advances with the primary's writes to the published tables",
        ));
    }
    if matches!(config.snapshot.mode, SnapshotMode::Always | SnapshotMode::WhenNeeded) {
        return Err(SourceError::permanent(
            "snapshot.mode always and when_needed re-read tables with incremental snapshots, whose watermarks are written to the server, and a standby is read-only",
            "set snapshot.mode: initial or never, or read from the primary",
        ));
    }
    if rows.first("primary_slot").is_none_or(str::is_empty) {
        warn!(
            "the standby has no primary_slot_name: the primary forgets its hot_standby_feedback whenever the standby reconnects, and may then remove catalog rows the slot needs; set primary_slot_name on the standby"
        );
    }
    Ok(true)
}
