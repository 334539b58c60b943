//! The `postgres` sink's config.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, Secret, SslMode};

pub use crate::db::{ApplyMode, ColumnFilter, SchemaEvolution};
use crate::registry::SinkSettings;
use crate::target::Target;

pub const DEFAULT_POSTGRES_SINK_PORT: u16 = 5432;
/// The source table's schema (PostgreSQL) or database (MySQL).
pub const DEFAULT_TARGET_SCHEMA: &str = "${schema}";
pub const DEFAULT_TARGET_TABLE: &str = "${table}";
/// Where the sink keeps `sluice_checkpoints`.
pub const DEFAULT_CHECKPOINT_SCHEMA: &str = "sluice";
pub const DEFAULT_DB_CONNECT_TIMEOUT_SECS: u64 = 10;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    pub id: String,
    #[serde(default = "crate::registry::default_required")]
    pub required: bool,
    #[serde(default)]
    pub buffer: crate::BufferConfig,
    #[serde(default)]
    pub delivery: crate::Delivery,
    /// This sink's own transforms, run in its writer after the pipeline's.
    #[serde(default)]
    pub transforms: Vec<sluice_transform::TransformConfig>,
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    pub database: String,
    pub user: String,
    #[serde(default)]
    pub password: Secret,
    #[serde(default = "default_ssl_mode")]
    pub ssl_mode: SslMode,
    /// PEM CA for `verify-ca` and `verify-full`.
    pub ca_file: Option<PathBuf>,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    #[serde(default)]
    pub mode: ApplyMode,
    /// Placeholders: `${schema}` (the source's schema, or its database for
    /// MySQL), `${db}`, `${table}` (without its schema).
    #[serde(default = "default_schema")]
    pub schema: String,
    #[serde(default = "default_table")]
    pub table: String,
    #[serde(default = "default_checkpoint_schema")]
    pub checkpoint_schema: String,
    /// Create missing schemas and tables from the source's columns.
    #[serde(default = "default_true")]
    pub auto_create: bool,
    #[serde(default)]
    pub schema_evolution: SchemaEvolution,
    #[serde(default)]
    pub columns: ColumnFilter,
    /// Key columns for source tables without a primary key, by table as
    /// events name it (`public.events: [id, at]`).
    #[serde(default)]
    pub keys: BTreeMap<String, Vec<String>>,
}

fn default_port() -> u16 {
    DEFAULT_POSTGRES_SINK_PORT
}
fn default_ssl_mode() -> SslMode {
    SslMode::Prefer
}
pub(crate) fn default_connect_timeout() -> u64 {
    DEFAULT_DB_CONNECT_TIMEOUT_SECS
}
pub(crate) fn default_schema() -> String {
    DEFAULT_TARGET_SCHEMA.to_string()
}
pub(crate) fn default_table() -> String {
    DEFAULT_TARGET_TABLE.to_string()
}
pub(crate) fn default_checkpoint_schema() -> String {
    DEFAULT_CHECKPOINT_SCHEMA.to_string()
}
pub(crate) fn default_true() -> bool {
    true
}

impl SinkSettings for PostgresSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Guarantee::ExactlyOnce { condition: None }
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        crate::db::check_common(
            at,
            crate::db::Common {
                host: &c.host,
                verifies: matches!(c.ssl_mode, SslMode::VerifyCa | SslMode::VerifyFull),
                has_ca_file: c.ca_file.is_some(),
                schema: &c.schema,
                table: &c.table,
                checkpoint_schema: &c.checkpoint_schema,
                keys: &c.keys,
                connect_timeout_secs: c.connect_timeout_secs,
            },
        )
    }

    fn preflight(&self) -> Result<(), (&'static str, String)> {
        crate::registry::readable_files(&[("ca_file", self.ca_file.as_deref())])
    }

    fn target(&self, _resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
        Some(Target::Named {
            kind: "PostgreSQL table",
            servers: vec![format!("{}:{}/{}", self.host.to_ascii_lowercase(), self.port, self.database)],
            name: format!("{}.{}", self.schema, self.table),
            shared: false,
        })
    }
}
