//! Sinks. `file` and `stdout` are always built; network sinks each sit
//! behind a cargo feature of their own.

pub mod file;
pub mod stdout;
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
        SinkConfig::Stdout(_) => Ok(()),
    }
}

/// Builds the sink a config describes. Connecting and recovery happen in
/// `Sink::open`, which the coordinator calls.
pub fn build(config: &SinkConfig) -> Box<dyn Sink> {
    match config {
        SinkConfig::File(c) => Box::new(FileSink::new(&c.id, &c.path)),
        SinkConfig::Stdout(c) => Box::new(StdoutSink::new(&c.id)),
    }
}

#[cfg(test)]
mod tests;
