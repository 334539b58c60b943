//! Pure checks of each source's config. No I/O. Every error names the
//! field path and the fix.

use sluice_core::settings::{Invalid, check_id, check_range, check_seconds};

use crate::mysql::{MysqlConfig, MysqlSslMode, MysqlStart};
use crate::pipeline::SourceConfig;
use crate::postgres::{PostgresConfig, SslMode};
use crate::snapshot::{SnapshotConfig, SnapshotMode};

pub(crate) fn validate_source(at: &str, source: &SourceConfig) -> Result<(), Invalid> {
    match source {
        SourceConfig::Postgres(c) => validate_postgres(at, c),
        SourceConfig::Mysql(c) => validate_mysql(at, c),
        SourceConfig::Generator(c) => {
            check_id(&format!("{at}.id"), &c.id)?;
            check_range(at, "rows_per_tx", u64::from(c.rows_per_tx), 1, 1_000_000, "rows")?;
            if let Some(count) = c.tx_count {
                check_range(at, "tx_count", count, 1, 1_000_000_000_000, "transactions (leave it out for endless)")?;
            }
            if c.tables.is_empty() {
                return Err(Invalid::new(
                    format!("{at}.tables"),
                    "the list is empty",
                    "list at least one table name, or leave tables out",
                ));
            }
            for (index, table) in c.tables.iter().enumerate() {
                check_id(&format!("{at}.tables[{index}]"), table)?;
            }
            // `seed` takes any u64: every value is a valid seed.
            match c.events_per_sec {
                Some(rate) => check_range(
                    at,
                    "events_per_sec",
                    rate,
                    1,
                    100_000_000,
                    "events a second (leave it out for as fast as possible)",
                ),
                None => Ok(()),
            }
        }
    }
}

fn validate_postgres(at: &str, c: &PostgresConfig) -> Result<(), Invalid> {
    check_id(&format!("{at}.id"), &c.id)?;
    for (field, value) in [("host", &c.host), ("database", &c.database), ("user", &c.user)] {
        if value.trim().is_empty() {
            return Err(Invalid::new(format!("{at}.{field}"), "is empty", format!("set {field}")));
        }
    }
    if c.port == 0 {
        return Err(Invalid::new(format!("{at}.port"), "port 0 is not a port", "set the server's port, e.g. 5432"));
    }
    for (i, entry) in c.failover_hosts.iter().enumerate() {
        let field = format!("{at}.failover_hosts[{i}]");
        if crate::postgres::parse_host_port(entry).is_none() {
            return Err(Invalid::new(
                field,
                format!("{entry:?} is not host or host:port"),
                "write each as host or host:port, e.g. db-standby.internal:5432",
            ));
        }
    }
    if matches!(c.ssl_mode, SslMode::VerifyCa | SslMode::VerifyFull) && c.ca_file.is_none() {
        return Err(Invalid::new(
            format!("{at}.ca_file"),
            "ssl_mode verify-ca and verify-full check the server certificate against a CA, and none is given",
            "set ca_file to the PEM file of the CA that signed the server certificate",
        ));
    }
    for (field, name) in [("slot", c.slot_name()), ("publication", c.publication_name())] {
        let plain = name.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
        if name.is_empty() || name.len() > 63 || !plain {
            return Err(Invalid::new(
                format!("{at}.{field}"),
                format!("{name:?} is not a valid {field} name"),
                "use 1 to 63 characters from a-z, 0-9 and '_'",
            ));
        }
    }
    if c.tables.is_empty() {
        return Err(Invalid::new(
            format!("{at}.tables"),
            "the list is empty",
            "list `schema.table` patterns, e.g. public.*",
        ));
    }
    for (index, pattern) in c.tables.iter().enumerate() {
        let parts: Vec<&str> = pattern.split('.').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(Invalid::new(
                format!("{at}.tables[{index}]"),
                format!("{pattern:?} is not a schema.table pattern"),
                "write schema.table, with * for any run of characters, e.g. public.* or sales.order_*",
            ));
        }
    }
    check_seconds(at, "status_interval_secs", c.status_interval_secs, 3600)?;
    check_seconds(at, "connect_timeout_secs", c.connect_timeout_secs, 3600)?;
    if let Some(heartbeat) = c.heartbeat_secs {
        check_seconds(at, "heartbeat_secs", heartbeat, 86_400)?;
    }
    check_snapshot(&format!("{at}.snapshot"), &c.snapshot)
}

fn check_snapshot(at: &str, c: &SnapshotConfig) -> Result<(), Invalid> {
    check_range(at, "chunk_size", c.chunk_size, 1, 1_000_000, "rows one query reads, e.g. 10000")?;
    check_range(
        at,
        "max_parallel_tables",
        c.max_parallel_tables as u64,
        1,
        64,
        "tables read at once (one connection each), e.g. 2",
    )
}

fn validate_mysql(at: &str, c: &MysqlConfig) -> Result<(), Invalid> {
    check_id(&format!("{at}.id"), &c.id)?;
    for (field, value) in [("host", &c.host), ("user", &c.user)] {
        if value.trim().is_empty() {
            return Err(Invalid::new(format!("{at}.{field}"), "is empty", format!("set {field}")));
        }
    }
    if c.port == 0 {
        return Err(Invalid::new(format!("{at}.port"), "port 0 is not a port", "set the server's port, e.g. 3306"));
    }
    if c.ssl_mode == MysqlSslMode::VerifyFull && c.ca_file.is_none() {
        return Err(Invalid::new(
            format!("{at}.ca_file"),
            "ssl_mode verify-full checks the server certificate against a CA, and none is given",
            "set ca_file to the PEM file of the CA that signed the server certificate",
        ));
    }
    if c.tables.is_empty() {
        return Err(Invalid::new(
            format!("{at}.tables"),
            "the list is empty",
            "list `database.table` patterns, e.g. shop.*",
        ));
    }
    for (index, pattern) in c.tables.iter().enumerate() {
        let parts: Vec<&str> = pattern.split('.').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(Invalid::new(
                format!("{at}.tables[{index}]"),
                format!("{pattern:?} is not a database.table pattern"),
                "write database.table, with * for any run of characters, e.g. shop.* or shop.order_*",
            ));
        }
    }
    if c.server_id == Some(0) {
        return Err(Invalid::new(
            format!("{at}.server_id"),
            "0 is not a valid replica server id",
            "leave server_id out, or pick an id no server uses",
        ));
    }
    match &c.start {
        // Binlog event headers hold positions in 32 bits.
        MysqlStart::Position { file, offset }
            if file.is_empty() || file.contains(':') || !(4..=u64::from(u32::MAX)).contains(offset) =>
        {
            return Err(Invalid::new(
                format!("{at}.start"),
                format!("needs a binlog file name (without ':') and an offset in 4..={}", u32::MAX),
                "take both from SHOW BINARY LOGS, e.g. { file: mariadb-bin.000001, offset: 4 }",
            ));
        }
        MysqlStart::Gtid(state) if state.trim().is_empty() => {
            return Err(Invalid::new(format!("{at}.start.gtid"), "is empty", "give a MariaDB GTID state like 0-1-100"));
        }
        _ => {}
    }
    check_seconds(at, "heartbeat_secs", c.heartbeat_secs, 3600)?;
    check_seconds(at, "connect_timeout_secs", c.connect_timeout_secs, 3600)?;
    if let Some(table) = &c.signal_table {
        let parts: Vec<&str> = table.split('.').collect();
        let plain = |p: &str| !p.is_empty() && p.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '$');
        if parts.len() != 2 || !parts.iter().all(|p| plain(p)) {
            return Err(Invalid::new(
                format!("{at}.signal_table"),
                format!("{table:?} is not a database.table name"),
                "name a table of letters, digits and '_', e.g. shop.sluice_signal",
            ));
        }
    }
    if matches!(c.snapshot.mode, SnapshotMode::Always | SnapshotMode::WhenNeeded) && c.signal_table.is_none() {
        return Err(Invalid::new(
            format!("{at}.signal_table"),
            "snapshot.mode always and when_needed re-read tables with incremental snapshots, which need a signal table",
            "set signal_table: DATABASE.sluice_signal (Sluice creates it)",
        ));
    }
    if c.snapshot.mode.initial() && c.start != MysqlStart::Current {
        return Err(Invalid::new(
            format!("{at}.start"),
            "a start position and snapshot.mode: initial both say where a new pipeline begins",
            "leave start out (the snapshot fixes the position itself), or set snapshot.mode: never",
        ));
    }
    check_snapshot(&format!("{at}.snapshot"), &c.snapshot)
}
