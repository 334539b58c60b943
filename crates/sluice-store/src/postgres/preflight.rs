//! `sluice validate --connect` for the PostgreSQL store: reached, and
//! usable by a first run, without writing anything.

use sluice_core::preflight::Check;
use sluice_pgwire::{ConnectParams, Connection};

use super::session::LOCK_CLASS;
use super::sql::{STORE_VERSION, quote_ident};

pub async fn checks(params: &ConnectParams, schema: &str) -> Vec<Check> {
    let server = format!("{}:{}/{}", params.host, params.port, params.database);
    let mut conn = match Connection::connect(params, false).await {
        Ok(conn) => conn,
        Err(e) => {
            return vec![Check::fail(
                "server",
                format!("cannot reach the store at {server}: {e}"),
                "check store.config host, port, user, password and ssl_mode",
            )];
        }
    };
    let mut checks = vec![Check::ok("server", format!("reached {server}"))];
    let name = schema.replace('\'', "''");
    let sql = format!(
        "SELECT has_database_privilege(current_user, current_database(), 'CREATE') AS can_create, \
         EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '{name}') AS present, \
         EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = {LOCK_CLASS} \
                 AND objid = hashtext('{name}')::oid AND granted) AS held"
    );
    let rows = match conn.simple_query(&sql).await {
        Ok(rows) => rows,
        Err(e) => {
            checks.push(Check::fail("schema", e.to_string(), "check the user's privileges on the store's database"));
            return checks;
        }
    };
    let yes = |column: &str| rows.first(column) == Some("t");
    if !yes("present") {
        if yes("can_create") {
            checks.push(Check::ok("schema", format!("{schema} will be created at the first run")));
        } else {
            checks.push(Check::fail(
                "schema",
                format!("{schema} does not exist, and the user may not create schemas in {}", params.database),
                format!("GRANT CREATE ON DATABASE {} TO the user, or create the schema for it", params.database),
            ));
        }
    } else {
        let version = conn
            .simple_query(&format!("SELECT max(version) AS v FROM {}.store_version", quote_ident(schema)))
            .await
            .ok()
            .and_then(|rows| rows.first("v").and_then(|v| v.parse::<i64>().ok()));
        checks.push(match version {
            Some(v) if v > STORE_VERSION => Check::fail(
                "schema",
                format!(
                    "{schema} holds a store of layout {v}, written by a newer Sluice (this one writes {STORE_VERSION})"
                ),
                "upgrade this instance, or give it another store.config.schema",
            ),
            Some(_) => Check::ok("schema", format!("{schema} holds a store this Sluice reads")),
            None => Check::fail(
                "schema",
                format!("{schema} exists but holds no store this user can read"),
                "give the store a schema of its own (store.config.schema), owned by this user",
            ),
        });
    }
    if yes("held") {
        checks.push(Check::warn(
            "lock",
            format!("a running sluice holds the store {schema} now"),
            "a second `sluice run` on this store is refused; stop the other one first, or give this one another schema",
        ));
    }
    conn.close().await;
    checks
}
