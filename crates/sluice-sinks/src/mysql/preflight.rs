//! `sluice validate --connect` for the mysql sink: the server answers, and
//! the user may keep its checkpoint and write the target database.
//!
//! MySQL has no `has_table_privilege`, so the checks read `SHOW GRANTS`
//! for the current user: global, database and table grants count; column
//! grants, and privileges held through a role that is not enabled by
//! default, do not (the fix says so).

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sluice_core::preflight::Check;

use super::config::MysqlSinkConfig;
use super::text::{ident, quoted};
use crate::db::SchemaEvolution;

/// What one `GRANT … ON … TO …` line gives.
#[derive(Debug, PartialEq)]
struct Grant {
    /// Upper-case privilege names; `ALL PRIVILEGES` stands for every one.
    privileges: Vec<String>,
    /// `None` for `*`.
    database: Option<String>,
    table: Option<String>,
}

/// The grants in `SHOW GRANTS` lines; lines that grant roles, routines or
/// proxies give none.
fn parse_grants<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Grant> {
    lines.into_iter().filter_map(parse_grant).collect()
}

fn parse_grant(line: &str) -> Option<Grant> {
    let rest = line.strip_prefix("GRANT ")?;
    let (privileges, rest) = split_outside_parens(rest, " ON ")?;
    let (object, _) = split_outside_parens(rest, " TO ")?;
    let privileges = split_top_level(privileges)
        .into_iter()
        .map(|p| p.trim())
        .filter(|p| !p.contains('('))
        .map(str::to_ascii_uppercase)
        .collect();
    let (database, rest) = name_part(object.trim())?;
    let (table, rest) = name_part(rest.strip_prefix('.')?)?;
    rest.is_empty().then_some(Grant { privileges, database, table })
}

/// Splits at the first `separator` outside parentheses and backticks.
fn split_outside_parens<'a>(text: &'a str, separator: &str) -> Option<(&'a str, &'a str)> {
    let (mut depth, mut quoted) = (0, false);
    for (i, c) in text.char_indices() {
        match c {
            '`' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            _ if depth == 0 && !quoted && text[i..].starts_with(separator) => {
                return Some((&text[..i], &text[i + separator.len()..]));
            }
            _ => {}
        }
    }
    None
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some((part, after)) = split_outside_parens(rest, ",") {
        parts.push(part);
        rest = after;
    }
    parts.push(rest);
    parts
}

/// One part of `db.table`: `*`, a backticked name or a bare one, and what
/// follows it; `None` for anything else.
fn name_part(text: &str) -> Option<(Option<String>, &str)> {
    if let Some(rest) = text.strip_prefix('*') {
        return Some((None, rest));
    }
    if let Some(quoted) = text.strip_prefix('`') {
        let mut name = String::new();
        let mut chars = quoted.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c != '`' {
                name.push(c);
            } else if chars.peek().map(|(_, next)| *next) == Some('`') {
                name.push('`');
                chars.next();
            } else {
                // A database grant may be a LIKE pattern with `\_` for `_`.
                return Some((Some(name.replace("\\_", "_").replace("\\%", "%")), &quoted[i + 1..]));
            }
        }
        return None;
    }
    let end = text.find('.').unwrap_or(text.len());
    // `PROCEDURE db.name` and the like grant routines, not tables.
    let name = &text[..end];
    (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| (Some(name.to_string()), &text[end..]))
}

/// Whether `grants` give `privilege` on `database` (and `table`, if named).
fn holds(grants: &[Grant], privilege: &str, database: &str, table: Option<&str>) -> bool {
    grants.iter().any(|grant| {
        let covers = match (&grant.database, &grant.table) {
            (None, _) => true,
            (Some(db), None) => db == database,
            (Some(db), Some(t)) => db == database && table == Some(t.as_str()),
        };
        covers && grant.privileges.iter().any(|p| p == privilege || p.starts_with("ALL"))
    })
}

fn missing<'a>(grants: &[Grant], wanted: &[&'a str], database: &str, table: Option<&str>) -> Vec<&'a str> {
    wanted.iter().copied().filter(|p| !holds(grants, p, database, table)).collect()
}

const ROLE_NOTE: &str = " (privileges held only through a role that is not enabled by default do not count here)";

pub async fn checks(config: &MysqlSinkConfig, conn: &mut Conn, server: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    let read: Result<(Vec<String>, Option<String>), mysql_async::Error> = async {
        let lines: Vec<String> = conn.query("SHOW GRANTS").await?;
        let user: Option<String> = conn.query_first("SELECT CURRENT_USER()").await?;
        Ok((lines, user))
    }
    .await;
    let (lines, user) = match read {
        Ok(read) => read,
        Err(e) => return vec![Check::warn("privileges", format!("cannot read the user's grants on {server}: {e}"), "check the user's privileges by hand")],
    };
    let user = user.map_or_else(|| config.user.clone(), |u| grantee(&u));
    let grants = parse_grants(lines.iter().map(String::as_str));

    let database = &config.checkpoint_schema;
    let found: Option<i64> = conn.query_first(super::checkpoint_table_count(database)).await.ok().flatten();
    let checkpoints = format!("{}.sluice_checkpoints", ident(database));
    checks.push(if found.unwrap_or(0) > 0 {
        let lacking = missing(&grants, &["SELECT", "INSERT", "UPDATE"], database, Some("sluice_checkpoints"));
        if lacking.is_empty() {
            Check::ok("checkpoint table", format!("{checkpoints} is writable"))
        } else {
            Check::fail(
                "checkpoint table",
                format!("{user} lacks {} on {checkpoints}{ROLE_NOTE}", lacking.join(", ")),
                format!("GRANT {} ON {checkpoints} TO {user}", lacking.join(", ")),
            )
        }
    } else if holds(&grants, "CREATE", database, None) {
        Check::ok("checkpoint table", format!("{checkpoints} will be created"))
    } else {
        Check::fail(
            "checkpoint table",
            format!("{checkpoints} is missing and {user} lacks CREATE on {}{ROLE_NOTE}", ident(database)),
            format!("create it, or GRANT CREATE, SELECT, INSERT, UPDATE ON {}.* TO {user}", ident(database)),
        )
    });
    checks.push(target_check(config, &grants, &user));
    checks
}

/// The privileges the target database needs: to write rows, and to create
/// and alter tables where the config lets the sink do so.
fn target_check(config: &MysqlSinkConfig, grants: &[Grant], user: &str) -> Check {
    let mut wanted = vec!["SELECT", "INSERT", "UPDATE", "DELETE"];
    if config.auto_create {
        wanted.push("CREATE");
    }
    if config.schema_evolution == SchemaEvolution::AddColumns {
        wanted.push("ALTER");
    }
    if config.schema.contains("${") {
        // Which databases the template names is known only per event.
        let anywhere = |p: &str| grants.iter().any(|g| g.privileges.iter().any(|q| q == p || q.starts_with("ALL")));
        let lacking = wanted.iter().copied().filter(|p| !anywhere(p)).collect::<Vec<_>>();
        return if lacking.is_empty() {
            Check::ok("target privileges", format!("{user} holds {} (the databases follow {:?})", wanted.join(", "), config.schema))
        } else {
            Check::warn(
                "target privileges",
                format!("{user} holds no grant of {} on any database{ROLE_NOTE}", lacking.join(", ")),
                format!("GRANT {} ON each database that {:?} names TO {user}", wanted.join(", "), config.schema),
            )
        };
    }
    let lacking = missing(grants, &wanted, &config.schema, None);
    let target = format!("{}.*", ident(&config.schema));
    if lacking.is_empty() {
        Check::ok("target privileges", format!("{user} holds {} on {target}", wanted.join(", ")))
    } else {
        Check::fail(
            "target privileges",
            format!("{user} lacks {} on {target}{ROLE_NOTE}", lacking.join(", ")),
            format!("GRANT {} ON {target} TO {user}", lacking.join(", ")),
        )
    }
}

/// `user@host` as a grant names it: `'user'@'host'`.
fn grantee(current: &str) -> String {
    match current.rsplit_once('@') {
        Some((user, host)) => format!("{}@{}", quoted(user), quoted(host)),
        None => quoted(current),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_of_every_level_are_read_and_roles_and_columns_give_none() {
        let grants = parse_grants([
            "GRANT USAGE ON *.* TO `sink`@`%` IDENTIFIED BY PASSWORD '*AB'",
            "GRANT SELECT, INSERT, UPDATE (note, `odd,name`), CREATE ON `shop`.* TO `sink`@`%`",
            "GRANT ALL PRIVILEGES ON `sluice`.`sluice_checkpoints` TO `sink`@`%` WITH GRANT OPTION",
            "GRANT `reader` TO `sink`@`%`",
            "GRANT EXECUTE ON PROCEDURE `shop`.`p` TO `sink`@`%`",
            "GRANT DELETE ON `my\\_db`.* TO 'sink'@'%'",
        ]);
        assert_eq!(grants.len(), 4, "{grants:?}");
        assert!(holds(&grants, "INSERT", "shop", Some("orders")));
        assert!(holds(&grants, "CREATE", "shop", None));
        assert!(!holds(&grants, "UPDATE", "shop", Some("orders")), "a column grant is not a table grant");
        assert!(!holds(&grants, "DELETE", "shop", None));
        assert!(holds(&grants, "UPDATE", "sluice", Some("sluice_checkpoints")));
        assert!(!holds(&grants, "UPDATE", "sluice", Some("other")));
        assert!(holds(&grants, "DELETE", "my_db", None));
        assert_eq!(missing(&grants, &["SELECT", "DELETE", "ALTER"], "shop", None), ["DELETE", "ALTER"]);
    }

    #[test]
    fn a_global_grant_covers_every_database() {
        let grants = parse_grants(["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"]);
        assert!(holds(&grants, "ALTER", "anything", Some("t")));
        assert_eq!(grantee("root@localhost"), "'root'@'localhost'");
    }
}
