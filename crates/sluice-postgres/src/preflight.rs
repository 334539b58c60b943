//! `sluice validate --connect` for a PostgreSQL source: what a first run
//! needs of the server, checked without changing anything.

use sluice_config::{KeylessTables, PostgresConfig};
use sluice_core::preflight::Check;

use crate::catalog::{self, Matched, quote_ident, quote_literal};
use crate::source::connect_params;
use crate::wire::Connection;

pub async fn checks(config: &PostgresConfig) -> Vec<Check> {
    // With failover_hosts, the checks are of the host a run would read.
    let params = match crate::hosts::primary(config, &connect_params(config)).await {
        Ok(params) => params,
        Err(e) => return vec![failed("connect", e)],
    };
    let mut conn = match Connection::connect(&params, false).await {
        Ok(conn) => conn,
        Err(e) => return vec![failed("connect", catalog::source_error("cannot connect", e))],
    };
    let mut checks = vec![Check::ok("connect", format!("{} as {}", params.addr(), config.user))];
    let server = match catalog::check_server(&mut conn, &config.user).await {
        Ok(version) => match catalog::check_features(config, version) {
            Ok(()) => crate::hosts::check_standby(&mut conn, config, version).await.map(|standby| (version, standby)),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match server {
        Ok((version, standby)) => {
            let role = if standby { ", a standby" } else { "" };
            checks.push(Check::ok("server", format!("wal_level logical, user may replicate, version {version}{role}")))
        }
        Err(e) => checks.push(failed("server", e)),
    }
    checks.push(match Connection::connect(&params, true).await {
        Ok(replication) => {
            replication.close().await;
            Check::ok("replication connection", "pg_hba.conf lets the user replicate")
        }
        Err(e) => failed("replication connection", catalog::source_error("a replication connection", e)),
    });
    match catalog::matching_tables(&mut conn, &config.tables).await {
        Ok(tables) => {
            checks.push(Check::ok("tables", format!("{} match {:?}", tables.len(), config.tables)));
            checks.extend(keyless(&tables, config.keyless_tables));
            checks.push(publication(&mut conn, config, &tables).await);
        }
        Err(e) => checks.push(failed("tables", e)),
    }
    checks.push(slot(&mut conn, config).await);
    conn.close().await;
    checks
}

fn failed(name: &str, e: sluice_core::SourceError) -> Check {
    Check::from_source_error(name, e, "check that the server runs and host and port")
}

fn keyless(tables: &[Matched], choice: KeylessTables) -> Option<Check> {
    let names: Vec<String> = tables.iter().filter(|t| t.keyless).map(Matched::name).collect();
    if names.is_empty() {
        return None;
    }
    let list = names.join(", ");
    Some(match choice {
        KeylessTables::Skip => Check::warn(
            "replica identity",
            format!("no primary key or replica identity, so they are left out: {list}"),
            "add a primary key, run ALTER TABLE … REPLICA IDENTITY FULL, or set keyless_tables: inserts_only or set_replica_identity_full",
        ),
        KeylessTables::InsertsOnly => Check::ok("replica identity", format!("only inserts and truncates of {list}")),
        KeylessTables::SetReplicaIdentityFull => {
            Check::ok("replica identity", format!("set to FULL at start (needs ownership): {list}"))
        }
    })
}

async fn publication(conn: &mut Connection, config: &PostgresConfig, tables: &[Matched]) -> Check {
    let name = config.publication_name();
    let query = format!(
        "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = {}) AS found, \
         has_database_privilege(current_user, current_database(), 'CREATE') AS may_create",
        quote_literal(&name)
    );
    let answer = match conn.simple_query(&query).await {
        Ok(answer) => answer,
        Err(e) => return failed("publication", catalog::source_error("reading pg_publication", e)),
    };
    let keyed: Vec<Matched> = tables.iter().filter(|t| !t.keyless).cloned().collect();
    let published = catalog::published(&keyed);
    if answer.first("found") == Some("0") {
        return match (config.create_publication, answer.first("may_create") == Some("t")) {
            (true, true) => Check::ok("publication", format!("{name} is missing; the source creates it")),
            (true, false) => Check::fail(
                "publication",
                format!("{name} is missing, and user {} may not create one", config.user),
                format!(
                    "GRANT CREATE ON DATABASE {} TO {}, or create it yourself",
                    quote_ident(&config.database),
                    quote_ident(&config.user)
                ),
            ),
            (false, _) => Check::fail(
                "publication",
                format!("{name} does not exist"),
                "set create_publication: true, or create it",
            ),
        };
    }
    match catalog::uncovered(conn, &name, &published).await {
        Ok(missing) if missing.is_empty() => Check::ok("publication", format!("{name} covers the tables")),
        Ok(missing) => Check::fail(
            "publication",
            format!("{name} does not cover {}", missing.join(", ")),
            format!(
                "run ALTER PUBLICATION {} ADD TABLE {}, or narrow `tables`",
                quote_ident(&name),
                missing.join(", ")
            ),
        ),
        Err(e) => failed("publication", e),
    }
}

async fn slot(conn: &mut Connection, config: &PostgresConfig) -> Check {
    let name = config.slot_name();
    let query = format!(
        "SELECT (SELECT active::text || ',' || coalesce(wal_status, '') || ',' || coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint::text, '') \
                 FROM pg_replication_slots WHERE slot_name = {}) AS slot, \
         current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots) AS free",
        quote_literal(&name)
    );
    let answer = match conn.simple_query(&query).await {
        Ok(answer) => answer,
        Err(e) => return failed("slot", catalog::source_error("reading pg_replication_slots", e)),
    };
    let Some(state) = answer.first("slot") else {
        let free: i64 = answer.first("free").and_then(|f| f.parse().ok()).unwrap_or(0);
        return match (config.create_slot, free > 0) {
            (true, true) => Check::ok("slot", format!("{name} is missing; the source creates it")),
            (true, false) => Check::fail(
                "slot",
                format!("{name} is missing, and every one of max_replication_slots is taken"),
                "raise max_replication_slots (and restart the server), or drop a slot no one reads",
            ),
            (false, _) => Check::fail("slot", format!("{name} does not exist"), "set create_slot: true, or create it"),
        };
    };
    let mut parts = state.split(',');
    let (active, wal_status, retained) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
    match (active, wal_status) {
        (_, Some("lost")) => Check::fail(
            "slot",
            format!("{name} was invalidated: the server removed WAL it still needed"),
            "drop the slot, reset the checkpoints and take a new snapshot (docs/postgres.md)",
        ),
        (Some("true"), _) => Check::warn(
            "slot",
            format!("{name} is in use by another connection"),
            "stop the other reader (a second sluice with this source id?) before the first run",
        ),
        _ => Check::ok("slot", format!("{name} exists, retaining {retained} bytes of WAL")),
    }
}
