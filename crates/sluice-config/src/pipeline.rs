//! The shape of a pipeline config. Each default is one `DEFAULT_*` constant.

use serde::Deserialize;
use sluice_sinks::SinkConfig;

/// Largest batch in events. Big enough to amortise a sink round trip and a
/// checkpoint commit, small enough to keep a batch's memory modest.
pub const DEFAULT_MAX_EVENTS: usize = 2000;
/// Largest batch in approximate bytes (16 MiB), a memory bound per batch.
pub const DEFAULT_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Longest a partial batch waits for more events (ms); bounds added latency.
pub const DEFAULT_MAX_MS: u64 = 50;
/// Batches in flight per sink before the source is held back. With 4, a
/// sink can work on one batch while the next three queue.
pub const DEFAULT_MAX_INFLIGHT: usize = 4;
/// Never cut a source transaction across batches: a sink never sees half
/// of a transaction, and one transaction is at most one sink transaction.
pub const DEFAULT_RESPECT_SOURCE_TX: bool = true;
/// Upper bound on any one sink call (s), so a hung sink cannot stall the
/// pipeline forever; a call past it is a transient failure and is retried.
pub const DEFAULT_SINK_BATCH_DEADLINE_SECS: u64 = 60;
/// How long a stop an operator asked for (SIGTERM) waits for the sinks to
/// write and flush what they hold (s): long enough for a healthy sink's
/// last batches, short enough for an orchestrator's kill timeout; the rest
/// is read again on the next start.
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 25;
/// How often a detached optional sink is probed (s): often enough that a
/// sink back from an outage catches up within a minute, rarely enough
/// that probing a dead server costs nothing.
pub const DEFAULT_REATTACH_PROBE_SECS: u64 = 30;
/// Rows in each generated transaction.
pub const DEFAULT_GENERATOR_ROWS_PER_TX: u32 = 10;
/// The generator's database name in event lineage.
pub const DEFAULT_GENERATOR_DATABASE: &str = "generator";
/// Dead letters kept per data dir before `on_full` applies: enough to
/// absorb a burst of poison events, small enough to notice.
pub const DEFAULT_DEAD_LETTER_MAX_ENTRIES: usize = 10_000;

/// The generator's single table when none is listed.
pub const DEFAULT_GENERATOR_TABLE: &str = "orders";

/// A whole config: one file, or every file of a folder merged.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where checkpoints and state are kept; the embedded store if unset.
    /// One file of a folder may set it.
    #[serde(default)]
    pub store: Option<crate::store::StoreConfig>,
    /// Where a fleet's leases live and how long they last; read by
    /// `sluice run --fleet`. One file of a folder may set it.
    #[serde(default)]
    pub fleet: Option<crate::fleet::FleetConfig>,
    /// A folder's file may hold the store alone; the whole config needs
    /// one pipeline at least.
    #[serde(default)]
    pub pipelines: Vec<PipelineConfig>,
}

impl Config {
    pub fn store(&self) -> crate::store::StoreConfig {
        self.store.clone().unwrap_or_default()
    }

    pub fn fleet(&self) -> crate::fleet::FleetConfig {
        self.fleet.clone().unwrap_or_default()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    pub name: String,
    pub source: SourceConfig,
    pub sinks: Vec<SinkConfig>,
    #[serde(default)]
    pub batch: BatchConfig,
    #[serde(default)]
    pub commit_policy: CommitPolicy,
    #[serde(default = "default_deadline")]
    pub sink_batch_deadline_secs: u64,
    #[serde(default = "default_reattach_probe")]
    pub reattach_probe_secs: u64,
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace_secs: u64,
    #[serde(default)]
    pub dead_letter: DeadLetterConfig,
    #[serde(default)]
    pub slo: SloConfig,
    /// Applied in order to every event, once, before the sinks get it.
    #[serde(default)]
    pub transforms: Vec<sluice_transform::TransformConfig>,
}

/// How long a source or required sink may keep failing before the
/// pipeline is reported not ready (s): long enough to ride out a broker
/// restart, short enough that an orchestrator hears about a real outage.
pub const DEFAULT_MAX_FAILING_SECS: u64 = 60;
/// The window a duplicate ratio is measured over (s): long enough that
/// one retried batch among thousands does not count as a trend.
pub const DEFAULT_DUPLICATE_WINDOW_SECS: u64 = 300;

fn default_duplicate_window() -> u64 {
    DEFAULT_DUPLICATE_WINDOW_SECS
}

/// Consecutive seconds a limit must be passed before it counts as breached:
/// one slow batch is not an incident.
pub const DEFAULT_BREACH_AFTER_SECS: u64 = 5;
/// Consecutive seconds a breached limit must be met before the breach
/// ends: longer than the breach delay, so an alert does not flap.
pub const DEFAULT_CLEAR_AFTER_SECS: u64 = 10;

/// Data service levels: limits that, once passed, make `/ready` fail, log
/// a warning and set `sluice_slo_breached`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloConfig {
    /// Largest lag of any sink behind the source's commits (s).
    pub max_lag_seconds: Option<u64>,
    /// Most WAL a PostgreSQL slot may keep for this pipeline.
    pub max_retained_wal_bytes: Option<u64>,
    /// On a `max_retained_wal_bytes` breach, detach the optional sink that
    /// holds the slot back, so it stops pinning WAL; it then needs a resync.
    #[serde(default)]
    pub detach_optional_sinks: bool,
    /// How long a source or required sink may keep failing (s).
    #[serde(default = "default_max_failing")]
    pub max_failing_secs: u64,
    /// Most events an at-least-once sink may write again after failed
    /// calls, as a share of the events it writes (0 to 1), over
    /// `duplicate_window_secs`.
    pub max_duplicate_ratio: Option<f64>,
    /// The window `max_duplicate_ratio` is measured over (s).
    #[serde(default = "default_duplicate_window")]
    pub duplicate_window_secs: u64,
    /// Seconds in a row a limit must be passed to count as breached.
    #[serde(default = "default_breach_after")]
    pub breach_after_secs: u64,
    /// Seconds in a row a breached limit must be met to end the breach.
    #[serde(default = "default_clear_after")]
    pub clear_after_secs: u64,
}

impl Default for SloConfig {
    fn default() -> Self {
        Self {
            max_lag_seconds: None,
            max_retained_wal_bytes: None,
            detach_optional_sinks: false,
            max_duplicate_ratio: None,
            duplicate_window_secs: DEFAULT_DUPLICATE_WINDOW_SECS,
            max_failing_secs: DEFAULT_MAX_FAILING_SECS,
            breach_after_secs: DEFAULT_BREACH_AFTER_SECS,
            clear_after_secs: DEFAULT_CLEAR_AFTER_SECS,
        }
    }
}

fn default_max_failing() -> u64 {
    DEFAULT_MAX_FAILING_SECS
}

fn default_breach_after() -> u64 {
    DEFAULT_BREACH_AFTER_SECS
}

fn default_clear_after() -> u64 {
    DEFAULT_CLEAR_AFTER_SECS
}

/// Where events a sink can never take go.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    #[serde(default = "default_dead_letter_max")]
    pub max_entries: usize,
    /// `stop`: a full queue stops the pipeline (nothing is dropped);
    /// `drop_oldest`: the oldest letter makes room.
    #[serde(default)]
    pub on_full: OnFull,
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        Self { max_entries: DEFAULT_DEAD_LETTER_MAX_ENTRIES, on_full: OnFull::default() }
    }
}

fn default_dead_letter_max() -> usize {
    DEFAULT_DEAD_LETTER_MAX_ENTRIES
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFull {
    #[default]
    Stop,
    DropOldest,
}

fn default_shutdown_grace() -> u64 {
    DEFAULT_SHUTDOWN_GRACE_SECS
}

fn default_reattach_probe() -> u64 {
    DEFAULT_REATTACH_PROBE_SECS
}

fn default_deadline() -> u64 {
    DEFAULT_SINK_BATCH_DEADLINE_SECS
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    #[serde(default = "default_max_events")]
    pub max_events: usize,
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    #[serde(default = "default_max_ms")]
    pub max_ms: u64,
    #[serde(default = "default_max_inflight")]
    pub max_inflight: usize,
    #[serde(default = "default_respect_source_tx")]
    pub respect_source_tx: bool,
}

fn default_max_events() -> usize {
    DEFAULT_MAX_EVENTS
}
fn default_max_bytes() -> usize {
    DEFAULT_MAX_BYTES
}
fn default_max_ms() -> u64 {
    DEFAULT_MAX_MS
}
fn default_max_inflight() -> usize {
    DEFAULT_MAX_INFLIGHT
}
fn default_respect_source_tx() -> bool {
    DEFAULT_RESPECT_SOURCE_TX
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_events: DEFAULT_MAX_EVENTS,
            max_bytes: DEFAULT_MAX_BYTES,
            max_ms: DEFAULT_MAX_MS,
            max_inflight: DEFAULT_MAX_INFLIGHT,
            respect_source_tx: DEFAULT_RESPECT_SOURCE_TX,
        }
    }
}

/// When the pipeline's checkpoints may advance.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitPolicy {
    #[serde(default)]
    pub mode: PolicyMode,
    /// With `mode: quorum`: how many sinks must hold a batch durably.
    pub quorum: Option<usize>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyMode {
    /// Every required sink holds the batch durably.
    #[default]
    Required,
    /// Every sink, required or not.
    All,
    /// At least `quorum` sinks, including every required one.
    Quorum,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", content = "config", rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceConfig {
    Generator(GeneratorConfig),
    Postgres(crate::postgres::PostgresConfig),
    Mysql(crate::mysql::MysqlConfig),
}

impl SourceConfig {
    pub fn id(&self) -> &str {
        match self {
            SourceConfig::Generator(c) => &c.id,
            SourceConfig::Postgres(c) => &c.id,
            SourceConfig::Mysql(c) => &c.id,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            SourceConfig::Generator(_) => "generator",
            SourceConfig::Postgres(_) => "postgres",
            SourceConfig::Mysql(_) => "mysql",
        }
    }
}

/// The deterministic synthetic source.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    pub id: String,
    /// Transactions to generate; absent means endless.
    pub tx_count: Option<u64>,
    #[serde(default = "default_rows_per_tx")]
    pub rows_per_tx: u32,
    #[serde(default = "default_tables")]
    pub tables: Vec<String>,
    #[serde(default = "default_generator_database")]
    pub database: String,
    /// Upper bound on events per second; absent means as fast as possible.
    pub events_per_sec: Option<u64>,
    /// Changes the generated values; the same seed always replays the same stream.
    #[serde(default)]
    pub seed: u64,
}

fn default_rows_per_tx() -> u32 {
    DEFAULT_GENERATOR_ROWS_PER_TX
}
fn default_tables() -> Vec<String> {
    vec![DEFAULT_GENERATOR_TABLE.to_string()]
}
fn default_generator_database() -> String {
    DEFAULT_GENERATOR_DATABASE.to_string()
}
