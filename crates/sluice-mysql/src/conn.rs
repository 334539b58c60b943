//! Connections to the source's server.

use std::time::Duration;

use mysql_async::{Conn, OptsBuilder, SslOpts};
use sluice_config::{MysqlConfig, MysqlSslMode};
use sluice_core::SourceError;

use crate::errors::mysql_error;

/// A connection to the source's server.
pub(crate) async fn connect(config: &MysqlConfig) -> Result<Conn, SourceError> {
    let mut opts = OptsBuilder::default()
        .ip_or_hostname(config.host.clone())
        .tcp_port(config.port)
        .user(Some(config.user.clone()))
        .pass(Some(config.password.expose().to_string()))
        .prefer_socket(false);
    opts = match config.ssl_mode {
        MysqlSslMode::Disable => opts,
        MysqlSslMode::Require => opts.ssl_opts(SslOpts::default().with_danger_accept_invalid_certs(true)),
        MysqlSslMode::VerifyFull => {
            let ca = config.ca_file.clone().unwrap_or_default();
            // The driver reads the file while connecting and reports a
            // missing one as an I/O error, which would be retried forever.
            if let Err(e) = std::fs::File::open(&ca) {
                return Err(SourceError::permanent(
                    format!("cannot read ca_file {}: {e}", ca.display()),
                    "set ca_file to a readable PEM file of the CA that signed the server certificate",
                ));
            }
            opts.ssl_opts(SslOpts::default().with_root_certs(vec![ca.into()]))
        }
    };
    let addr = format!("{}:{}", config.host, config.port);
    let timeout = Duration::from_secs(config.connect_timeout_secs);
    match tokio::time::timeout(timeout, Conn::new(opts)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(mysql_error(&format!("connection to {addr} as {:?}", config.user), e)),
        Err(_) => Err(SourceError::transient(format!("connection to {addr} timed out after {}s", timeout.as_secs()))),
    }
}
