//! Config errors: each names the file, the field path and the fix.

use std::fmt;
use std::path::PathBuf;

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

/// A config that parsed but breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// Where the problem is, e.g. `pipelines[0].sinks[1].config.id`.
    pub field: String,
    pub problem: String,
    /// What to change.
    pub hint: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; hint: {}", self.field, self.problem, self.hint)
    }
}

impl Invalid {
    pub fn new(field: impl Into<String>, problem: impl Into<String>, hint: impl Into<String>) -> Self {
        Self { field: field.into(), problem: problem.into(), hint: hint.into() }
    }
}

impl From<Invalid> for ConfigError {
    fn from(value: Invalid) -> Self {
        ConfigError::Invalid(value)
    }
}
