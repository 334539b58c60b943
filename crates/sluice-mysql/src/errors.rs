//! MySQL / MariaDB errors, classified by type and server error code.
//!
//! Retrying helps only with what can change by itself: a lost connection,
//! a busy or restarting server, a lock. A refused login or a TLS refusal
//! comes back the same on every attempt until an operator changes the
//! config or the server, so it stops the pipeline with the fix instead of
//! being retried forever.

use mysql_async::{DriverError, IoError};
use sluice_core::SourceError;

const AUTH_HINT: &str = "check user and password, and that the user may connect from this host";

/// What to do about a server error code: retry it, or stop with a hint.
pub fn classify(code: u16) -> Result<(), &'static str> {
    match code {
        // too many connections, lock wait timeout, deadlock, server shutdown,
        // connection lost or refused
        1040 | 1205 | 1213 | 1053 | 2002 | 2003 | 2006 | 2013 => Ok(()),
        // access denied (password), without a password, host not allowed
        1045 | 1698 | 1130 => Err(AUTH_HINT),
        1044 => Err("GRANT the user access to the database, or check the database name"),
        1129 => Err(
            "the server blocked this host after too many failed connections: run FLUSH HOSTS (or raise max_connect_errors) on the server",
        ),
        1251 => Err(
            "the user's authentication plugin is not one Sluice speaks; use mysql_native_password or caching_sha2_password",
        ),
        // password expired (1820 reset, 1862 expired at login)
        1820 | 1862 => Err("the user's password has expired: set a new one with ALTER USER ... IDENTIFIED BY"),
        // account locked (MySQL 3118, MariaDB 4151)
        3118 | 4151 => Err("the account is locked: ALTER USER ... ACCOUNT UNLOCK, or use another user"),
        // the server requires TLS (MySQL require_secure_transport)
        3159 => Err("the server accepts only TLS connections: set ssl_mode: require or verify-full (with ca_file)"),
        1227 => Err("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user; reading the binlog needs both"),
        1236 => Err(
            "the server cannot serve the requested binlog position: if it was purged, the changes since are gone; reset this source's checkpoints with `sluice checkpoints reset` and take a new snapshot",
        ),
        1049 => Err("check the database name"),
        _ => Err("the server's message says what is wrong"),
    }
}

/// What to do about an error of the client library itself: `None` to
/// retry, or the hint of a refusal that a retry cannot change.
pub fn driver_refusal(err: &DriverError) -> Option<(&'static str, &'static str)> {
    match err {
        DriverError::NoClientSslFlagFromServer => Some((
            "the server does not offer TLS, and the source's ssl_mode asks for it",
            "enable TLS on the server (ssl_cert and ssl_key; `SHOW VARIABLES LIKE 'have_ssl'` then says YES), or set ssl_mode: disable if the network to the server is trusted",
        )),
        DriverError::UnknownAuthPlugin { .. } | DriverError::CleartextPluginDisabled => Some((
            "the server asks for an authentication plugin Sluice does not use",
            "give the user mysql_native_password or caching_sha2_password (ALTER USER ... IDENTIFIED WITH ...)",
        )),
        DriverError::MysqlOldPasswordDisabled => Some((
            "the user has an old-style (pre-4.1) password hash, which is insecure",
            "set a new password for the user (ALTER USER ... IDENTIFIED BY)",
        )),
        DriverError::NoKeyFound => Some(("no private key found in the client key file", "check the TLS key file")),
        _ => None,
    }
}

const TLS_HINT: &str = "check ssl_mode and ca_file: with verify-full the server certificate must be signed by ca_file and name host; ssl_mode: require skips the check";

pub fn mysql_error(context: &str, err: mysql_async::Error) -> SourceError {
    match &err {
        mysql_async::Error::Server(server) => match classify(server.code) {
            Ok(()) => SourceError::transient_from(format!("{context}: {err}"), err),
            Err(hint) => SourceError::permanent_from(format!("{context}: {err}"), hint, err),
        },
        mysql_async::Error::Driver(driver) => match driver_refusal(driver) {
            Some((what, hint)) => SourceError::permanent_from(format!("{context}: {what} ({err})"), hint, err),
            None => SourceError::transient_from(format!("{context}: {err}"), err),
        },
        // A certificate that does not verify, a bad CA file or a handshake
        // the server refuses: the same on every attempt.
        mysql_async::Error::Io(IoError::Tls(_)) => {
            SourceError::permanent_from(format!("{context}: TLS refused: {err}"), TLS_HINT, err)
        }
        mysql_async::Error::Io(_) => SourceError::transient_from(format!("{context}: {err}"), err),
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

    #[test]
    fn refused_logins_are_permanent_with_a_hint() {
        for code in [1044, 1045, 1129, 1130, 1251, 1698, 1820, 1862, 3118, 3159, 4151] {
            let hint = classify(code).expect_err("a refused login is permanent");
            assert!(!hint.contains("message says"), "{code} has its own hint: {hint}");
        }
        assert!(classify(1045).unwrap_err().contains("password"));
        assert!(classify(3159).unwrap_err().contains("ssl_mode"));
    }

    #[test]
    fn tls_and_plugin_refusals_are_permanent_and_lost_connections_are_not() {
        let err = mysql_error("connection", mysql_async::Error::Driver(DriverError::NoClientSslFlagFromServer));
        assert!(!err.is_transient());
        let text = err.to_string();
        assert!(text.contains("ssl_mode") && text.contains("does not offer TLS"), "{text}");
        let plugin = DriverError::UnknownAuthPlugin { name: "dialog".into() };
        assert!(!mysql_error("connection", mysql_async::Error::Driver(plugin)).is_transient());
        assert!(mysql_error("connection", mysql_async::Error::Driver(DriverError::ConnectionClosed)).is_transient());
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(mysql_error("binlog stream", mysql_async::Error::Io(IoError::Io(reset))).is_transient());
    }
}
