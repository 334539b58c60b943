//! Sinks. `file` and `stdout` are always built; network sinks each sit
//! behind a cargo feature of their own.

pub mod file;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "s3")]
pub mod object;
#[cfg(feature = "redis")]
pub mod redis;
pub mod stdout;
#[cfg(any(feature = "kafka", feature = "redis", feature = "nats", feature = "http"))]
mod template;
pub mod testing;

use sluice_config::SinkConfig;
use sluice_core::Sink;

pub use file::FileSink;
pub use stdout::StdoutSink;

/// Checks what can be checked of a sink's config without writing anything
/// (a file path's parent, for instance). Returns the field (relative to the
/// sink's `config`) and the problem.
pub fn preflight(config: &SinkConfig) -> Result<(), (&'static str, String)> {
    match config {
        SinkConfig::File(c) => file::preflight(&c.path).map_err(|problem| ("path", problem)),
        SinkConfig::S3(c) => match &c.local {
            Some(folder) => {
                let target = folder.join(c.prefix.trim_start_matches('/'));
                file::writable_folder(&target, &target).map_err(|problem| ("local", problem))
            }
            None => Ok(()),
        },
        SinkConfig::Stdout(_)
        | SinkConfig::Kafka(_)
        | SinkConfig::Redis(_)
        | SinkConfig::Nats(_)
        | SinkConfig::Http(_) => Ok(()),
    }
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

/// Builds the sink a config describes. Connecting and recovery happen in
/// `Sink::open`, which the coordinator calls.
#[cfg_attr(not(any(feature = "kafka", feature = "redis", feature = "s3")), allow(unused_variables))]
pub fn build(config: &SinkConfig, context: &SinkContext) -> Result<Box<dyn Sink>, NotBuilt> {
    Ok(match config {
        SinkConfig::File(c) => Box::new(FileSink::new(&c.id, &c.path)),
        SinkConfig::Stdout(c) => Box::new(StdoutSink::new(&c.id)),
        #[cfg(feature = "kafka")]
        SinkConfig::Kafka(c) => Box::new(kafka::KafkaSink::new(c.clone(), &context.pipeline, &context.source_id)),
        #[cfg(not(feature = "kafka"))]
        SinkConfig::Kafka(_) => return Err(NotBuilt("kafka")),
        #[cfg(feature = "redis")]
        SinkConfig::Redis(c) => Box::new(redis::RedisSink::new(c.clone(), &context.source_id)),
        #[cfg(not(feature = "redis"))]
        SinkConfig::Redis(_) => return Err(NotBuilt("redis")),
        #[cfg(feature = "nats")]
        SinkConfig::Nats(c) => Box::new(nats::NatsSink::new(c.clone())),
        #[cfg(not(feature = "nats"))]
        SinkConfig::Nats(_) => return Err(NotBuilt("nats")),
        #[cfg(feature = "http")]
        SinkConfig::Http(c) => Box::new(http::HttpSink::new(c.clone())),
        #[cfg(not(feature = "http"))]
        SinkConfig::Http(_) => return Err(NotBuilt("http")),
        #[cfg(feature = "s3")]
        SinkConfig::S3(c) => Box::new(object::ObjectSink::new(c.clone(), &context.pipeline, &context.data_dir)),
        #[cfg(not(feature = "s3"))]
        SinkConfig::S3(_) => return Err(NotBuilt("s3")),
    })
}

#[cfg(test)]
mod tests;
