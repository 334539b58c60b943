//! Choosing the server to read. With `failover_hosts`, every start and
//! every reconnect reads from the first of the source's hosts that is not
//! in recovery, so after a standby is promoted the pipeline follows it and
//! resumes from its slot (a failover slot the standby kept in step, from
//! PostgreSQL 17). Until one answers as a primary, the start fails as
//! transient and is retried with backoff.

use sluice_config::PostgresConfig;
use sluice_core::SourceError;
use tracing::info;

use crate::catalog::source_error;
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
