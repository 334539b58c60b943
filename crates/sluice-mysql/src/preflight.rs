//! `sluice validate --connect` for a MySQL or MariaDB source: what a first
//! run needs of the server, checked without changing anything.

use mysql_async::prelude::Queryable;
use sluice_config::{MysqlConfig, glob_match};
use sluice_core::preflight::Check;

use crate::conn::connect;
use crate::errors::mysql_error;
use crate::start::check_binlog;

fn failed(name: &str, e: sluice_core::SourceError) -> Check {
    Check::from_source_error(name, e, "check that the server runs, and host and port")
}

pub async fn checks(config: &MysqlConfig) -> Vec<Check> {
    let mut conn = match connect(config).await {
        Ok(conn) => conn,
        Err(e) => return vec![failed("connect", e)],
    };
    let mut checks = vec![Check::ok("connect", format!("{}:{} as {}", config.host, config.port, config.user))];
    checks.push(match check_binlog(&mut conn).await {
        Ok((server_id, version)) => {
            Check::ok("binlog", format!("ROW format, FULL row image; {version}, server_id {server_id}"))
        }
        Err(e) => failed("binlog", e),
    });
    checks.push(match conn.query_drop("SHOW BINARY LOGS").await {
        Ok(()) => Check::ok("binlog files", "the user may list them (REPLICATION CLIENT)"),
        Err(e) => failed("binlog files", mysql_error("SHOW BINARY LOGS", e)),
    });
    checks.push(replication_grant(&mut conn).await);
    checks.extend(tables(&mut conn, &config.tables).await);
    let _ = conn.disconnect().await;
    checks
}

/// Reading the binlog takes REPLICATION SLAVE, which only a grant shows.
async fn replication_grant(conn: &mut mysql_async::Conn) -> Check {
    let grants: Vec<String> = match conn.query("SHOW GRANTS FOR CURRENT_USER()").await {
        Ok(grants) => grants,
        Err(e) => return failed("replication grant", mysql_error("SHOW GRANTS", e)),
    };
    let global = grants.iter().map(|g| g.to_ascii_uppercase()).filter(|g| g.contains(" ON *.*"));
    let allowed = global
        .into_iter()
        .any(|g| g.contains("ALL PRIVILEGES") || g.contains("REPLICATION SLAVE") || g.contains("REPLICATION REPLICA"));
    if allowed {
        Check::ok("replication grant", "the user may read the binlog (REPLICATION SLAVE)")
    } else {
        Check::fail(
            "replication grant",
            "the user lacks REPLICATION SLAVE on *.*",
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user",
        )
    }
}

async fn tables(conn: &mut mysql_async::Conn, patterns: &[String]) -> Vec<Check> {
    let query = "SELECT CONCAT(t.TABLE_SCHEMA, '.', t.TABLE_NAME), \
                 EXISTS (SELECT 1 FROM information_schema.TABLE_CONSTRAINTS c WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA \
                   AND c.TABLE_NAME = t.TABLE_NAME AND c.CONSTRAINT_TYPE = 'PRIMARY KEY') \
                 FROM information_schema.TABLES t WHERE t.TABLE_TYPE = 'BASE TABLE' \
                 AND t.TABLE_SCHEMA NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema')";
    let found: Vec<(String, bool)> = match conn.query(query).await {
        Ok(found) => found,
        Err(e) => return vec![failed("tables", mysql_error("listing tables", e))],
    };
    let matched: Vec<&(String, bool)> =
        found.iter().filter(|(name, _)| patterns.iter().any(|p| glob_match(p, name))).collect();
    if matched.is_empty() {
        return vec![Check::fail(
            "tables",
            format!("no table the user can see matches {patterns:?}"),
            "check `tables` (database.table, * for any run of characters) and the user's SELECT grants",
        )];
    }
    let mut checks = vec![Check::ok("tables", format!("{} match {patterns:?}", matched.len()))];
    let keyless: Vec<&str> = matched.iter().filter(|(_, key)| !key).map(|(name, _)| name.as_str()).collect();
    if !keyless.is_empty() {
        checks.push(Check::warn(
            "primary keys",
            format!("no primary key, so an incremental snapshot cannot read them: {}", keyless.join(", ")),
            "add a primary key where you can",
        ));
    }
    checks
}
