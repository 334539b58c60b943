//! MySQL / MariaDB errors, classified by type and server error code.

use sluice_core::SourceError;

/// What to do about a server error code: retry it, or stop with a hint.
pub fn classify(code: u16) -> Result<(), &'static str> {
    match code {
        // too many connections, lock wait timeout, deadlock, server shutdown,
        // connection lost or refused
        1040 | 1205 | 1213 | 1053 | 2002 | 2003 | 2006 | 2013 => Ok(()),
        1045 => Err("check user and password, and that the user may connect from this host"),
        1227 => Err("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user; reading the binlog needs both"),
        1236 => Err(
            "the server cannot serve the requested binlog position: if it was purged, the changes since are gone; reset this source's checkpoints with `sluice checkpoints reset` and take a new snapshot",
        ),
        1049 => Err("check the database name"),
        _ => Err("the server's message says what is wrong"),
    }
}

pub fn mysql_error(context: &str, err: mysql_async::Error) -> SourceError {
    match &err {
        mysql_async::Error::Server(server) => match classify(server.code) {
            Ok(()) => SourceError::transient_from(format!("{context}: {err}"), err),
            Err(hint) => SourceError::permanent_from(format!("{context}: {err}"), hint, err),
        },
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => {
            SourceError::transient_from(format!("{context}: {err}"), err)
        }
        _ => SourceError::permanent_from(format!("{context}: {err}"), "check the source's connection settings", err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes() {
        for transient in [1040, 1205, 1213, 1053, 2013] {
            assert!(classify(transient).is_ok(), "{transient}");
        }
        for permanent in [1045, 1227, 1236, 1049, 1146] {
            assert!(classify(permanent).is_err(), "{permanent}");
        }
        assert!(classify(1236).unwrap_err().contains("purged"));
    }
}
