//! Pure validation of what is the pipeline's (ids, batch, commit policy,
//! SLOs, sources); each sink checks its own config (`SinkSettings::validate`).
//! No I/O. Every error names the field path and the fix.

use std::collections::HashSet;

use sluice_core::settings::{Invalid, check_id, check_range, check_seconds};
use sluice_sinks::SinkConfig;

use crate::mysql::{MysqlConfig, MysqlSslMode, MysqlStart};
use crate::pipeline::{BatchConfig, CommitPolicy, Config, PipelineConfig, PolicyMode, SourceConfig};
use crate::postgres::{PostgresConfig, SslMode};
use crate::snapshot::{SnapshotConfig, SnapshotMode};

/// The largest batch in events: far past any throughput gain, and short
/// of sizes whose buffers would exhaust memory before the first write.
pub const MAX_BATCH_EVENTS: u64 = 1_000_000;
/// The largest batch in bytes (1 GiB).
pub const MAX_BATCH_BYTES: u64 = 1 << 30;
/// The most batches in flight per sink; each holds its events in memory,
/// and the runtime's semaphore has a far lower limit than `usize::MAX`.
pub const MAX_INFLIGHT: u64 = 1024;
/// The largest `slo.max_retained_wal_bytes` (1 PiB).
pub const MAX_RETAINED_WAL_BYTES: u64 = 1 << 50;

pub fn validate(config: &Config) -> Result<(), Invalid> {
    if config.pipelines.is_empty() {
        return Err(Invalid::new("pipelines", "no pipeline is defined", "add at least one entry under `pipelines:`"));
    }
    let mut names = HashSet::new();
    let mut source_ids = HashSet::new();
    for (index, pipeline) in config.pipelines.iter().enumerate() {
        let at = format!("pipelines[{index}]");
        check_id(&format!("{at}.name"), &pipeline.name)?;
        if !names.insert(pipeline.name.as_str()) {
            return Err(Invalid::new(
                format!("{at}.name"),
                format!("pipeline name {:?} is used twice", pipeline.name),
                "give every pipeline its own name",
            ));
        }
        let source_id = pipeline.source.id();
        if !source_ids.insert(source_id) {
            return Err(Invalid::new(
                format!("{at}.source.config.id"),
                format!("source id {source_id:?} is used by two pipelines; their checkpoints would collide"),
                "give every pipeline's source its own id",
            ));
        }
        validate_pipeline(&at, pipeline)?;
    }
    crate::target::shared_target(config, &sluice_sinks::target::normalize)
}

fn validate_pipeline(at: &str, pipeline: &PipelineConfig) -> Result<(), Invalid> {
    validate_source(&format!("{at}.source.config"), &pipeline.source)?;
    if pipeline.sinks.is_empty() {
        return Err(Invalid::new(format!("{at}.sinks"), "the pipeline has no sink", "add at least one sink"));
    }
    let mut sink_ids = HashSet::new();
    for (index, sink) in pipeline.sinks.iter().enumerate() {
        let sink_at = format!("{at}.sinks[{index}].config");
        check_id(&format!("{sink_at}.id"), sink.id())?;
        if !sink_ids.insert(sink.id()) {
            return Err(Invalid::new(
                format!("{sink_at}.id"),
                format!("sink id {:?} is used twice in pipeline {:?}", sink.id(), pipeline.name),
                "give every sink of a pipeline its own id; the id keys its checkpoint",
            ));
        }
        sink.settings().validate(&sink_at)?;
    }
    validate_batch(&format!("{at}.batch"), &pipeline.batch)?;
    validate_policy(&format!("{at}.commit_policy"), &pipeline.commit_policy, &pipeline.sinks)?;
    let dead_letter_at = format!("{at}.dead_letter");
    check_range(&dead_letter_at, "max_entries", pipeline.dead_letter.max_entries as u64, 1, 100_000_000, "letters")?;
    validate_slo(&format!("{at}.slo"), pipeline)?;
    check_seconds(at, "sink_batch_deadline_secs", pipeline.sink_batch_deadline_secs, 86_400)
}

fn validate_slo(at: &str, pipeline: &PipelineConfig) -> Result<(), Invalid> {
    let slo = &pipeline.slo;
    check_seconds(at, "max_failing_secs", slo.max_failing_secs, 86_400)?;
    if let Some(lag) = slo.max_lag_seconds {
        check_seconds(at, "max_lag_seconds", lag, 7 * 86_400)?;
    }
    if let Some(bytes) = slo.max_retained_wal_bytes {
        check_range(
            at,
            "max_retained_wal_bytes",
            bytes,
            1,
            MAX_RETAINED_WAL_BYTES,
            "bytes (e.g. 10737418240 for 10 GiB)",
        )?;
    }
    if slo.max_retained_wal_bytes.is_some() && !matches!(pipeline.source, SourceConfig::Postgres(_)) {
        return Err(Invalid::new(
            format!("{at}.max_retained_wal_bytes"),
            "only a PostgreSQL source has a slot that retains WAL",
            "remove it; MySQL and MariaDB keep binlogs by age and size, whatever Sluice has read",
        ));
    }
    if slo.detach_optional_sinks {
        if slo.max_retained_wal_bytes.is_none() {
            return Err(Invalid::new(
                format!("{at}.detach_optional_sinks"),
                "needs max_retained_wal_bytes: it acts on a breach of it",
                "set max_retained_wal_bytes too, or remove detach_optional_sinks",
            ));
        }
        if pipeline.commit_policy.mode == PolicyMode::All {
            return Err(Invalid::new(
                format!("{at}.detach_optional_sinks"),
                "commit_policy.mode all waits for every sink, so no sink can be detached",
                "use commit_policy.mode required or quorum, or remove detach_optional_sinks",
            ));
        }
    }
    Ok(())
}

fn validate_source(at: &str, source: &SourceConfig) -> Result<(), Invalid> {
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

fn validate_batch(at: &str, batch: &BatchConfig) -> Result<(), Invalid> {
    check_range(at, "max_events", batch.max_events as u64, 1, MAX_BATCH_EVENTS, "events")?;
    check_range(at, "max_bytes", batch.max_bytes as u64, 1, MAX_BATCH_BYTES, "bytes")?;
    check_range(at, "max_ms", batch.max_ms, 1, 3_600_000, "milliseconds")?;
    check_range(at, "max_inflight", batch.max_inflight as u64, 1, MAX_INFLIGHT, "batches")
}

fn validate_policy(at: &str, policy: &CommitPolicy, sinks: &[SinkConfig]) -> Result<(), Invalid> {
    match (policy.mode, policy.quorum) {
        (PolicyMode::Quorum, None) => Err(Invalid::new(
            format!("{at}.quorum"),
            "mode quorum needs a quorum",
            format!("set quorum to a number from 1 to {}", sinks.len()),
        )),
        (PolicyMode::Quorum, Some(n)) if n == 0 || n > sinks.len() => Err(Invalid::new(
            format!("{at}.quorum"),
            format!("quorum {n} is outside 1..={}, the pipeline's sink count", sinks.len()),
            format!("set quorum to a number from 1 to {}", sinks.len()),
        )),
        (PolicyMode::Required | PolicyMode::All, Some(_)) => Err(Invalid::new(
            format!("{at}.quorum"),
            "quorum is only read with mode: quorum",
            "remove quorum, or set mode: quorum",
        )),
        (PolicyMode::Required, None) if !sinks.iter().any(SinkConfig::required) => Err(Invalid::new(
            format!("{at}.mode"),
            "mode required with no required sink would let checkpoints advance on nothing",
            "mark at least one sink `required: true`, or choose mode all or quorum",
        )),
        _ => Ok(()),
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
