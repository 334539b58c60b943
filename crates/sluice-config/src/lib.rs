//! Pipeline configuration: reading YAML files (one file or a folder of
//! them), `${VAR}` expansion, and pure validation. Building sources and
//! sinks from a config, which does I/O, happens elsewhere.

mod error;
mod expand;
mod fleet;
mod mysql;
mod pipeline;
mod postgres;
mod snapshot;
mod sources;
mod store;
mod target;
mod validate;

use std::path::{Path, PathBuf};

pub use error::ConfigError;
pub use expand::{ExpandError, expand};
pub use fleet::*;
pub use mysql::*;
pub use pipeline::*;
pub use postgres::*;
pub use sluice_core::settings::{Invalid, MAX_ID_LEN, Secret, check_template, valid_topic};
// Sink configs live beside their sinks; they are re-exported here so a
// config is read from one crate.
pub use sluice_core::glob_match;
pub use sluice_sinks::buffer::*;
pub use sluice_sinks::http::config::*;
pub use sluice_sinks::kafka::config::*;
pub use sluice_sinks::nats::config::*;
pub use sluice_sinks::object::config::*;
pub use sluice_sinks::redis::config::*;
pub use sluice_sinks::target::normalize;
pub use sluice_sinks::{
    DEFAULT_REQUIRED, FileSinkConfig, NullSinkConfig, SINK_TYPES, SinkConfig, SinkSettings, StdoutSinkConfig,
};
pub use snapshot::*;
pub use store::*;
pub use target::shared_target;
pub use validate::validate;

/// Reads, expands, parses and validates a config file or folder, with
/// variables from the process environment.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_with(path, |name| std::env::var(name).ok())
}

/// [`load`] with a chosen variable lookup, for tests.
pub fn load_with(path: &Path, lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let files = config_files(path)?;
    let mut merged = Config { store: None, fleet: None, pipelines: Vec::new() };
    let (mut store_file, mut fleet_file) = (None, None);
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|cause| ConfigError::Read { path: file.clone(), cause })?;
        let config = parse(&file, &text, &lookup)?;
        if config.store.is_some() {
            once("store", &mut store_file, &file)?;
            merged.store = config.store;
        }
        if config.fleet.is_some() {
            once("fleet", &mut fleet_file, &file)?;
            merged.fleet = config.fleet;
        }
        merged.pipelines.extend(config.pipelines);
    }
    validate(&merged)?;
    Ok(merged)
}

/// A section only one file of a folder may set: refused when `first`
/// already did.
fn once(section: &str, first: &mut Option<PathBuf>, file: &Path) -> Result<(), ConfigError> {
    if let Some(first) = first {
        return Err(ConfigError::Invalid(sluice_core::settings::Invalid::new(
            section,
            format!("is set in both {} and {}", first.display(), file.display()),
            format!("set the {section} in one file of the folder"),
        )));
    }
    *first = Some(file.to_path_buf());
    Ok(())
}

/// Expands and parses one file's text; does not validate.
pub fn parse(path: &Path, text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let expanded = expand(text, lookup).map_err(|e| ConfigError::Variable {
        path: path.to_path_buf(),
        line: e.line,
        problem: e.problem,
    })?;
    serde_yaml::from_str(&expanded)
        .map_err(|e| ConfigError::Syntax { path: path.to_path_buf(), message: e.to_string() })
}

fn config_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read_error = |cause| ConfigError::Read { path: path.to_path_buf(), cause };
    if !std::fs::metadata(path).map_err(read_error)?.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(read_error)? {
        let file = entry.map_err(read_error)?.path();
        let yaml = matches!(file.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
        if yaml && file.is_file() {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(ConfigError::EmptyFolder { path: path.to_path_buf() });
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests;
