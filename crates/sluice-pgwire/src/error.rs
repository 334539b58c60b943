//! Connection errors, classified by type and SQLSTATE, never by text.

use std::fmt;

use super::frame::Fields;

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("cannot connect to {addr}: {cause}")]
    Connect {
        addr: String,
        #[source]
        cause: std::io::Error,
    },
    #[error("connection to {addr} failed: {cause}")]
    Io {
        addr: String,
        #[source]
        cause: std::io::Error,
    },
    #[error("{addr} did not answer within {secs}s")]
    Timeout { addr: String, secs: u64 },
    #[error("TLS with {addr}: {detail}")]
    Tls { addr: String, detail: String },
    #[error("{addr}: {detail}")]
    Protocol { addr: String, detail: String },
    #[error("{0}: {1}")]
    Server(String, ServerError),
}

/// An ErrorResponse from the server.
#[derive(Debug, Clone)]
pub struct ServerError(pub Fields);

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = &self.0;
        write!(f, "{} (SQLSTATE {})", fields.message, fields.code)?;
        if let Some(detail) = &fields.detail {
            write!(f, "; detail: {detail}")?;
        }
        if let Some(hint) = &fields.hint {
            write!(f, "; server hint: {hint}")?;
        }
        Ok(())
    }
}

impl PgError {
    /// The SQLSTATE of a server error.
    pub fn code(&self) -> Option<&str> {
        match self {
            PgError::Server(_, e) => Some(&e.0.code),
            _ => None,
        }
    }

    /// Whether retrying may help: the network, a restarting or overloaded
    /// server. Bad credentials, missing objects and privileges are not.
    pub fn is_transient(&self) -> bool {
        match self {
            PgError::Connect { .. } | PgError::Io { .. } | PgError::Timeout { .. } | PgError::Protocol { .. } => true,
            PgError::Tls { .. } => false,
            PgError::Server(_, e) => sqlstate_is_transient(&e.0.code),
        }
    }
}

/// The SQLSTATE table: which server errors are worth retrying.
pub fn sqlstate_is_transient(code: &str) -> bool {
    match code {
        // The replication slot is in use: usually our own previous
        // connection, which the server has not noticed is gone yet.
        "55006" => true,
        _ => matches!(
            code.get(..2),
            // connection exception, insufficient resources, operator
            // intervention (shutdown, restart), system error, transaction rollback
            Some("08" | "53" | "57" | "58" | "40")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstate_classes() {
        for transient in ["08006", "57P01", "57P03", "53300", "55006", "40001", "58030"] {
            assert!(sqlstate_is_transient(transient), "{transient}");
        }
        // bad password, no privilege, missing object, wrong state (wal_level, invalidated slot)
        for permanent in ["28P01", "42501", "42704", "55000", "3D000", "", "x"] {
            assert!(!sqlstate_is_transient(permanent), "{permanent}");
        }
    }
}
