//! What `sluice validate --connect` checks of each source and sink before
//! a first run: one line per check, and for each failure the fix.

/// How one check went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok(String),
    /// A first run works, but not as the operator may expect.
    Warn {
        problem: String,
        fix: String,
    },
    /// A first run would fail.
    Fail {
        problem: String,
        fix: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, such as `wal_level` or `brokers`.
    pub name: String,
    pub outcome: Outcome,
}

impl Check {
    pub fn ok(name: &str, detail: impl Into<String>) -> Self {
        Self { name: name.to_string(), outcome: Outcome::Ok(detail.into()) }
    }

    pub fn warn(name: &str, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name: name.to_string(), outcome: Outcome::Warn { problem: problem.into(), fix: fix.into() } }
    }

    pub fn fail(name: &str, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { name: name.to_string(), outcome: Outcome::Fail { problem: problem.into(), fix: fix.into() } }
    }

    /// A failed call as a check: a permanent error brings its own fix,
    /// `fix` serves a transient one (no answer, a refused connection).
    pub fn from_source_error(name: &str, e: crate::SourceError, fix: &str) -> Self {
        match e {
            crate::SourceError::Permanent { detail, hint, .. } => Self::fail(name, detail, hint),
            other => Self::fail(name, other.to_string(), fix),
        }
    }

    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Fail { .. })
    }
}
