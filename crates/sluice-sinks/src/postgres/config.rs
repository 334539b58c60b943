//! The `postgres` sink's config.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, Secret, SslMode, check_id, check_seconds};

use crate::registry::SinkSettings;
use crate::target::Target;

pub const DEFAULT_POSTGRES_SINK_PORT: u16 = 5432;
/// The source table's schema (PostgreSQL) or database (MySQL).
pub const DEFAULT_TARGET_SCHEMA: &str = "${schema}";
pub const DEFAULT_TARGET_TABLE: &str = "${table}";
/// Where the sink keeps `sluice_checkpoints`.
pub const DEFAULT_CHECKPOINT_SCHEMA: &str = "sluice";
pub const DEFAULT_DB_CONNECT_TIMEOUT_SECS: u64 = 10;

/// What the sink does with each change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyMode {
    /// The target table mirrors the source table by key.
    #[default]
    Apply,
    /// Every change appended as a row, keyed by its event id.
    Changelog,
}

/// What the sink does when a source table's columns change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaEvolution {
    /// Add new columns and widen columns whose type grew; stop on anything else.
    #[default]
    AddColumns,
    /// Change nothing; stop when an event has a column the target lacks.
    None,
}

/// Which columns reach the target. A name is a column of every table
/// (`ssn`) or of one table (`public.users.ssn`, the table as events name it).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnFilter {
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl ColumnFilter {
    /// Whether `column` of `table` is written.
    pub fn keeps(&self, table: &str, column: &str) -> bool {
        let names = |list: &[String]| {
            list.iter().any(|name| match name.rsplit_once('.') {
                Some((t, c)) => t == table && c == column,
                None => name == column,
            })
        };
        (self.include.is_empty() || names(&self.include)) && !names(&self.exclude)
    }
}

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
fn default_connect_timeout() -> u64 {
    DEFAULT_DB_CONNECT_TIMEOUT_SECS
}
fn default_schema() -> String {
    DEFAULT_TARGET_SCHEMA.to_string()
}
fn default_table() -> String {
    DEFAULT_TARGET_TABLE.to_string()
}
fn default_checkpoint_schema() -> String {
    DEFAULT_CHECKPOINT_SCHEMA.to_string()
}
fn default_true() -> bool {
    true
}

/// A name template of a database sink: `${schema}`, `${db}` and `${table}` only.
pub fn check_name_template(at: &str, field: &str, template: &str) -> Result<(), Invalid> {
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(Invalid::new(format!("{at}.{field}"), "`${` without a closing `}`", "close the placeholder"));
        };
        if !matches!(&after[..end], "schema" | "db" | "table") {
            return Err(Invalid::new(
                format!("{at}.{field}"),
                format!("unknown placeholder ${{{}}}", &after[..end]),
                "use ${schema}, ${db} or ${table}",
            ));
        }
        rest = &after[end + 1..];
    }
    if template.is_empty() {
        return Err(Invalid::new(format!("{at}.{field}"), "is empty", "name a schema or table, or leave it out"));
    }
    Ok(())
}

impl SinkSettings for PostgresSinkConfig {
    fn guarantee(&self) -> Guarantee {
        Guarantee::ExactlyOnce { condition: None }
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        if c.host.is_empty() {
            return Err(Invalid::new(format!("{at}.host"), "is empty", "name the target server"));
        }
        if matches!(c.ssl_mode, SslMode::VerifyCa | SslMode::VerifyFull) && c.ca_file.is_none() {
            return Err(Invalid::new(
                format!("{at}.ca_file"),
                "is required with ssl_mode verify-ca or verify-full",
                "give the PEM file of the CA that signed the server's certificate",
            ));
        }
        check_name_template(at, "schema", &c.schema)?;
        check_name_template(at, "table", &c.table)?;
        check_id(&format!("{at}.checkpoint_schema"), &c.checkpoint_schema)?;
        for (table, key) in &c.keys {
            if key.is_empty() {
                return Err(Invalid::new(
                    format!("{at}.keys.{table}"),
                    "names no column",
                    "list the columns that identify a row",
                ));
            }
        }
        check_seconds(at, "connect_timeout_secs", c.connect_timeout_secs, 600)
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
