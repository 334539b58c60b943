//! Sinks, one folder each, listed once in [`for_all_sinks`]. `file`,
//! `stdout` and `null` are always built; network sinks each sit behind a
//! cargo feature of their own. Every sink's config is compiled in every
//! build, so a config naming a sink this build lacks still validates and
//! is refused only when built ([`NotBuilt`]).

#[cfg(feature = "avro")]
mod avro;
pub mod buffer;
pub mod db;
mod delivery;
mod encoded;
mod preflight;
mod registry;
pub mod target;
#[cfg(any(feature = "kafka", feature = "redis", feature = "nats", feature = "http"))]
mod template;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use sluice_core::Sink;

pub use buffer::{BufferConfig, BufferLimits};
pub use delivery::Delivery;
pub use registry::{DEFAULT_REQUIRED, SinkSettings, default_required};
pub use target::Target;

/// The sink list: one line per sink, `(variant, module, type name, config
/// type[, cargo feature])`. The variant's snake_case name is the YAML
/// `type`. Adding a sink is a folder, a line here, a cargo feature if it
/// needs one, and its docs.
macro_rules! for_all_sinks {
    ($then:path) => {
        $then! {
            (File, file, "file", FileSinkConfig),
            (Stdout, stdout, "stdout", StdoutSinkConfig),
            (Null, null, "null", NullSinkConfig),
            (Kafka, kafka, "kafka", KafkaSinkConfig, "kafka"),
            (Redis, redis, "redis", RedisSinkConfig, "redis"),
            (Nats, nats, "nats", NatsSinkConfig, "nats"),
            (Http, http, "http", HttpSinkConfig, "http"),
            (S3, object, "s3", S3SinkConfig, "s3"),
            (Postgres, postgres, "postgres", PostgresSinkConfig, "postgres"),
            (Mysql, mysql, "mysql", MysqlSinkConfig, "mysql"),
        }
    };
}

for_all_sinks!(registry::sink_registry);

pub use file::FileSink;
pub use stdout::StdoutSink;

/// Checks what can be checked of a sink's config without writing anything
/// (a file path's parent, for instance). Returns the field (relative to the
/// sink's `config`) and the problem.
pub fn preflight(config: &SinkConfig) -> Result<(), (&'static str, String)> {
    config.settings().preflight()
}

/// What a sink may need to know about its pipeline.
#[derive(Debug, Clone)]
pub struct SinkContext {
    pub pipeline: String,
    pub source_id: String,
    /// `--data-dir`; a sink that stages files keeps them under it.
    pub data_dir: std::path::PathBuf,
}

/// A sink type this build was compiled without.
#[derive(Debug, thiserror::Error)]
#[error("sink type {0:?} is not part of this build; hint: rebuild sluice with the `{0}` cargo feature")]
pub struct NotBuilt(pub &'static str);

#[cfg(test)]
mod tests;
