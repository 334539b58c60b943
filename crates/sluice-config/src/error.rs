//! Config errors: each names the file, the field path and the fix.

use std::path::PathBuf;

use sluice_core::settings::Invalid;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {cause}; hint: check the path given to -c")]
    Read {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    #[error("config folder {path} holds no .yaml or .yml file; hint: point -c at a pipeline file or a folder of them")]
    EmptyFolder { path: PathBuf },
    #[error("{path} line {line}: {problem}")]
    Variable { path: PathBuf, line: usize, problem: String },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(Invalid),
}

impl From<Invalid> for ConfigError {
    fn from(value: Invalid) -> Self {
        ConfigError::Invalid(value)
    }
}
