//! The `mysql` sink's config (MySQL and MariaDB targets).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, MysqlSslMode, Secret};

pub use crate::db::{ApplyMode, ColumnFilter, SchemaEvolution};
use crate::registry::SinkSettings;
use crate::target::Target;

pub const DEFAULT_MYSQL_SINK_PORT: u16 = 3306;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MysqlSinkConfig {
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
    pub user: String,
    #[serde(default)]
    pub password: Secret,
    #[serde(default = "default_ssl_mode")]
    pub ssl_mode: MysqlSslMode,
    /// PEM CA for `verify-full`.
    pub ca_file: Option<PathBuf>,
    #[serde(default = "crate::postgres::config::default_connect_timeout")]
    pub connect_timeout_secs: u64,
    #[serde(default)]
    pub mode: ApplyMode,
    /// The target database. Placeholders: `${schema}` (the source's schema,
    /// or its database for MySQL), `${db}`, `${table}`.
    #[serde(default = "crate::postgres::config::default_schema")]
    pub schema: String,
    #[serde(default = "crate::postgres::config::default_table")]
    pub table: String,
    /// The database of `sluice_checkpoints`.
    #[serde(default = "crate::postgres::config::default_checkpoint_schema")]
    pub checkpoint_schema: String,
    #[serde(default = "crate::postgres::config::default_true")]
    pub auto_create: bool,
    #[serde(default)]
    pub schema_evolution: SchemaEvolution,
    #[serde(default)]
    pub columns: ColumnFilter,
    #[serde(default)]
    pub keys: BTreeMap<String, Vec<String>>,
}

fn default_port() -> u16 {
    DEFAULT_MYSQL_SINK_PORT
}
/// As the mysql source: plain text unless TLS is asked for.
fn default_ssl_mode() -> MysqlSslMode {
    MysqlSslMode::Disable
}

impl SinkSettings for MysqlSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Guarantee::ExactlyOnce { condition: Some("InnoDB tables") }
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        crate::db::check_common(
            at,
            crate::db::Common {
                host: &c.host,
                verifies: c.ssl_mode == MysqlSslMode::VerifyFull,
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
            kind: "MySQL table",
            servers: vec![format!("{}:{}", self.host.to_ascii_lowercase(), self.port)],
            name: format!("{}.{}", self.schema, self.table),
            shared: false,
        })
    }
}
