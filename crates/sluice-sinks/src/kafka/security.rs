//! How the `kafka` sink reaches a broker that wants TLS or SASL: Confluent
//! Cloud, MSK, Aiven and most company clusters.
//!
//! The binary's librdkafka is built with OpenSSL, which gives it TLS and
//! the SASL mechanisms that need no other library: PLAIN and
//! SCRAM-SHA-256/512. Kerberos (GSSAPI) and OAUTHBEARER (which needs a
//! token provider) are not built in, so `sluice validate` refuses them
//! rather than letting a run fail.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::settings::{Invalid, Secret};

/// Check the broker's certificate names the host dialled: without it any
/// certificate the CA signed would do.
pub const DEFAULT_KAFKA_VERIFY_HOSTNAME: bool = true;

/// `tls:` of a `kafka` sink: present means the connection is encrypted.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaTls {
    /// PEM CA bundle the broker's certificate must chain to; absent: the
    /// system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for brokers that authenticate clients by it.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Password of an encrypted `key_file`.
    #[serde(default)]
    pub key_password: Secret,
    #[serde(default = "default_verify_hostname")]
    pub verify_hostname: bool,
}

fn default_verify_hostname() -> bool {
    DEFAULT_KAFKA_VERIFY_HOSTNAME
}

/// `sasl:` of a `kafka` sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    pub mechanism: KafkaSaslMechanism,
    pub username: String,
    pub password: Secret,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum KafkaSaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl KafkaSaslMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaSaslMechanism::Plain => "PLAIN",
            KafkaSaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            KafkaSaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// librdkafka settings the `tls` and `sasl` fields own; `client_conf` may
/// not set them.
pub const KAFKA_SECURITY_SETTINGS: [&str; 9] = [
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
];

/// The librdkafka settings for `tls` and `sasl`, in the order they apply.
pub fn librdkafka_settings(tls: Option<&KafkaTls>, sasl: Option<&KafkaSasl>) -> Vec<(&'static str, String)> {
    let protocol = match (tls.is_some(), sasl.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    let mut settings = vec![("security.protocol", protocol.to_string())];
    let path = |p: &Path| p.display().to_string();
    if let Some(tls) = tls {
        if let Some(ca) = &tls.ca_file {
            settings.push(("ssl.ca.location", path(ca)));
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            settings.push(("ssl.certificate.location", path(cert)));
            settings.push(("ssl.key.location", path(key)));
        }
        if !tls.key_password.expose().is_empty() {
            settings.push(("ssl.key.password", tls.key_password.expose().to_string()));
        }
        let verify = if tls.verify_hostname { "https" } else { "none" };
        settings.push(("ssl.endpoint.identification.algorithm", verify.to_string()));
    }
    if let Some(sasl) = sasl {
        settings.push(("sasl.mechanism", sasl.mechanism.as_str().to_string()));
        settings.push(("sasl.username", sasl.username.clone()));
        settings.push(("sasl.password", sasl.password.expose().to_string()));
    }
    settings
}

/// Pure checks of `tls`, `sasl` and the security keys of `client_conf`.
pub fn validate(at: &str, tls: Option<&KafkaTls>, sasl: Option<&KafkaSasl>, client_conf: &[&str]) -> Result<(), Invalid> {
    if let Some(tls) = tls
        && tls.cert_file.is_some() != tls.key_file.is_some()
    {
        let missing = if tls.cert_file.is_none() { "cert_file" } else { "key_file" };
        return Err(Invalid::new(
            format!("{at}.tls.{missing}"),
            "a client certificate needs both cert_file and key_file",
            "set both, or neither",
        ));
    }
    if let Some(sasl) = sasl
        && sasl.username.is_empty()
    {
        return Err(Invalid::new(format!("{at}.sasl.username"), "is empty", "set the SASL user name"));
    }
    for key in client_conf {
        let field = format!("{at}.client_conf.{key}");
        if KAFKA_SECURITY_SETTINGS.contains(key) || key.starts_with("sasl.") {
            let hint = if key.starts_with("sasl.kerberos") || key.starts_with("sasl.oauthbearer") {
                "this build supports SASL PLAIN and SCRAM-SHA-256/512 only (no Kerberos or OAUTHBEARER); \
                 set them with the sink's `sasl` field"
            } else {
                "use the sink's `tls` (ca_file, cert_file, key_file, key_password, verify_hostname) and \
                 `sasl` (mechanism, username, password) fields"
            };
            return Err(Invalid::new(field, "is set through the sink's tls and sasl fields", hint));
        }
    }
    Ok(())
}

/// Checks that look at the disk: every file named is readable.
pub fn preflight(tls: Option<&KafkaTls>) -> Result<(), (&'static str, String)> {
    let Some(tls) = tls else { return Ok(()) };
    crate::registry::readable_files(&[
        ("tls.ca_file", tls.ca_file.as_deref()),
        ("tls.cert_file", tls.cert_file.as_deref()),
        ("tls.key_file", tls.key_file.as_deref()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls() -> KafkaTls {
        KafkaTls {
            ca_file: Some("/ca.pem".into()),
            cert_file: None,
            key_file: None,
            key_password: Secret::default(),
            verify_hostname: true,
        }
    }

    fn scram() -> KafkaSasl {
        KafkaSasl { mechanism: KafkaSaslMechanism::ScramSha512, username: "u".into(), password: Secret::new("p") }
    }

    #[test]
    fn the_protocol_follows_what_is_set() {
        let protocol = |tls: Option<&KafkaTls>, sasl: Option<&KafkaSasl>| librdkafka_settings(tls, sasl)[0].1.clone();
        assert_eq!(protocol(None, None), "plaintext");
        assert_eq!(protocol(Some(&tls()), None), "ssl");
        assert_eq!(protocol(None, Some(&scram())), "sasl_plaintext");
        assert_eq!(protocol(Some(&tls()), Some(&scram())), "sasl_ssl");
        let all = librdkafka_settings(Some(&tls()), Some(&scram()));
        assert!(all.contains(&("sasl.mechanism", "SCRAM-SHA-512".to_string())));
        assert!(all.contains(&("ssl.ca.location", "/ca.pem".to_string())));
        assert!(all.contains(&("ssl.endpoint.identification.algorithm", "https".to_string())));
    }

    #[test]
    fn half_a_client_certificate_and_security_keys_in_client_conf_are_refused() {
        let half = KafkaTls { cert_file: Some("/c.pem".into()), ..tls() };
        assert_eq!(validate("s", Some(&half), None, &[]).unwrap_err().field, "s.tls.key_file");
        let err = validate("s", None, None, &["security.protocol"]).unwrap_err();
        assert_eq!(err.field, "s.client_conf.security.protocol");
        let kerberos = validate("s", None, None, &["sasl.kerberos.service.name"]).unwrap_err();
        assert!(kerberos.hint.contains("no Kerberos"), "{kerberos}");
        assert!(validate("s", Some(&tls()), Some(&scram()), &["ssl.cipher.suites"]).is_ok());
    }
}
