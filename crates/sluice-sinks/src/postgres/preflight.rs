//! `sluice validate --connect` for the postgres sink: the server answers,
//! and the user may keep its checkpoint and create what it needs.

use sluice_core::preflight::Check;
use sluice_pgwire::{ConnectParams, Connection};

use super::config::PostgresSinkConfig;
use super::text::quote_literal;

pub async fn checks(config: &PostgresSinkConfig, params: &ConnectParams, checkpoints: &str) -> Vec<Check> {
    let server = format!("{}:{}/{}", params.host, params.port, params.database);
    let mut conn = match Connection::connect(params, false).await {
        Ok(conn) => conn,
        Err(e) => {
            return vec![Check::fail(
                "connect",
                format!("cannot reach {server}: {e}"),
                "check host, port, database, user, password and ssl_mode",
            )];
        }
    };
    let mut checks = vec![Check::ok("connect", format!("{server} as {}", params.user))];
    let schema = quote_literal(&config.checkpoint_schema);
    let sql = format!(
        "SELECT to_regclass({table}) IS NOT NULL AS found, \
         COALESCE(has_table_privilege(to_regclass({table}), 'SELECT, INSERT, UPDATE'), false) AS writable, \
         has_database_privilege(current_database(), 'CREATE') AS create_db, \
         COALESCE((SELECT has_schema_privilege(oid, 'CREATE') FROM pg_namespace WHERE nspname = {schema}), false) AS create_schema",
        table = quote_literal(checkpoints)
    );
    match conn.simple_query(&sql).await {
        Ok(rows) => {
            let yes = |column: &str| rows.first(column) == Some("t");
            checks.push(match (yes("found"), yes("writable"), yes("create_schema") || yes("create_db")) {
                (true, true, _) => Check::ok("checkpoint table", format!("{checkpoints} is writable")),
                (true, false, _) => Check::fail(
                    "checkpoint table",
                    format!("{} may not write {checkpoints}", params.user),
                    format!("GRANT SELECT, INSERT, UPDATE ON {checkpoints} TO {}", params.user),
                ),
                (false, _, true) => Check::ok("checkpoint table", format!("{checkpoints} will be created")),
                (false, _, false) => Check::fail(
                    "checkpoint table",
                    format!("{checkpoints} is missing and {} may not create it", params.user),
                    format!(
                        "create it, or GRANT CREATE ON SCHEMA {} (or ON DATABASE) TO {}",
                        config.checkpoint_schema, params.user
                    ),
                ),
            });
            if config.auto_create && !yes("create_db") {
                checks.push(Check::warn(
                    "auto_create",
                    format!("{} may not create schemas in {}", params.user, params.database),
                    "create the target schemas beforehand and grant CREATE on them, or GRANT CREATE ON DATABASE",
                ));
            }
        }
        Err(e) => checks.push(Check::fail("privileges", e.to_string(), "check the user's privileges")),
    }
    conn.close().await;
    checks
}
