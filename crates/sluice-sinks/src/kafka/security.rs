//! How the `kafka` sink reaches a broker that wants TLS or SASL: Confluent
//! Cloud, MSK, Aiven and most company clusters.
//!
//! The binary's librdkafka is built with OpenSSL and libcurl, which give it
//! TLS, PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER with tokens from an OpenID
//! Connect provider (the client credentials grant, as Confluent Cloud and
//! most identity providers offer it). Kerberos (GSSAPI) is not built in, so
//! `sluice validate` refuses it rather than letting a run fail.

use std::collections::BTreeMap;
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

/// `sasl:` of a `kafka` sink: a user name and password for PLAIN and
/// SCRAM, a client of an OpenID Connect provider for OAUTHBEARER.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    pub mechanism: KafkaSaslMechanism,
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: Secret,
    /// OAUTHBEARER: where tokens come from (`POST`, client credentials).
    pub token_endpoint_url: Option<String>,
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub client_secret: Secret,
    /// OAUTHBEARER: the scope asked for, if the provider wants one.
    pub scope: Option<String>,
    /// OAUTHBEARER: SASL extensions sent with the token (Confluent Cloud's
    /// `logicalCluster` and `identityPoolId`).
    #[serde(default)]
    pub extensions: BTreeMap<String, String>,
    /// OAUTHBEARER: PEM CA bundle the token endpoint's certificate must
    /// chain to; absent: the system's roots.
    pub token_ca_file: Option<PathBuf>,
}

impl KafkaSasl {
    fn is_oauth(&self) -> bool {
        self.mechanism == KafkaSaslMechanism::OauthBearer
    }
}

/// What to check when the brokers (or, for OAUTHBEARER, the token
/// endpoint) refuse the login.
pub fn login_hint(sasl: Option<&KafkaSasl>) -> &'static str {
    match sasl {
        Some(sasl) if sasl.is_oauth() => {
            "check sasl.token_endpoint_url, sasl.client_id, sasl.client_secret and sasl.scope, and that the \
             brokers trust the provider's tokens"
        }
        _ => "check sasl.mechanism, sasl.username and sasl.password",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum KafkaSaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
    #[serde(rename = "OAUTHBEARER")]
    OauthBearer,
}

impl KafkaSaslMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaSaslMechanism::Plain => "PLAIN",
            KafkaSaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            KafkaSaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            KafkaSaslMechanism::OauthBearer => "OAUTHBEARER",
        }
    }
}

/// librdkafka settings the `tls` and `sasl` fields own; `client_conf` may
/// not set them.
pub const KAFKA_SECURITY_SETTINGS: [&str; 11] = [
    "security.protocol",
    "https.ca.location",
    "https.ca.pem",
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
        if sasl.is_oauth() {
            settings.extend(oauth_settings(sasl));
        } else {
            settings.push(("sasl.username", sasl.username.clone()));
            settings.push(("sasl.password", sasl.password.expose().to_string()));
        }
    }
    settings
}

/// librdkafka fetches and refreshes the token itself (`oidc` method).
fn oauth_settings(sasl: &KafkaSasl) -> Vec<(&'static str, String)> {
    let mut settings = vec![
        ("sasl.oauthbearer.method", "oidc".to_string()),
        ("sasl.oauthbearer.token.endpoint.url", sasl.token_endpoint_url.clone().unwrap_or_default()),
        ("sasl.oauthbearer.client.id", sasl.client_id.clone()),
        ("sasl.oauthbearer.client.secret", sasl.client_secret.expose().to_string()),
    ];
    if let Some(scope) = &sasl.scope {
        settings.push(("sasl.oauthbearer.scope", scope.clone()));
    }
    if !sasl.extensions.is_empty() {
        let pairs: Vec<String> = sasl.extensions.iter().map(|(k, v)| format!("{k}={v}")).collect();
        settings.push(("sasl.oauthbearer.extensions", pairs.join(",")));
    }
    if let Some(ca) = &sasl.token_ca_file {
        settings.push(("https.ca.location", ca.display().to_string()));
    }
    settings
}

/// The fields of `sasl` that belong to the other kind of mechanism.
fn misplaced(sasl: &KafkaSasl) -> Option<&'static str> {
    let oauth = [
        ("token_endpoint_url", sasl.token_endpoint_url.is_some()),
        ("client_id", !sasl.client_id.is_empty()),
        ("client_secret", !sasl.client_secret.expose().is_empty()),
        ("scope", sasl.scope.is_some()),
        ("extensions", !sasl.extensions.is_empty()),
        ("token_ca_file", sasl.token_ca_file.is_some()),
    ];
    let login = [("username", !sasl.username.is_empty()), ("password", !sasl.password.expose().is_empty())];
    let other: &[(&'static str, bool)] = if sasl.is_oauth() { &login } else { &oauth };
    other.iter().find(|(_, set)| *set).map(|(name, _)| *name)
}

fn validate_sasl(at: &str, sasl: &KafkaSasl) -> Result<(), Invalid> {
    let field = |name: &str| format!("{at}.sasl.{name}");
    if let Some(name) = misplaced(sasl) {
        let owner = if sasl.is_oauth() { "PLAIN and SCRAM" } else { "OAUTHBEARER" };
        return Err(Invalid::new(
            field(name),
            format!("applies to mechanism {owner}, not {}", sasl.mechanism.as_str()),
            "remove it, or change the mechanism",
        ));
    }
    if !sasl.is_oauth() {
        if sasl.username.is_empty() {
            return Err(Invalid::new(field("username"), "is empty", "set the SASL user name"));
        }
        return Ok(());
    }
    let url = sasl.token_endpoint_url.as_deref().unwrap_or_default();
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else {
        return Err(Invalid::new(
            field("token_endpoint_url"),
            if url.is_empty() { "is required for OAUTHBEARER".to_string() } else { format!("{url:?} is not an http(s) URL") },
            "give the identity provider's token endpoint, e.g. https://idp.example.com/oauth2/token",
        ));
    };
    if rest.split('/').next().is_some_and(|authority| authority.contains('@')) {
        return Err(Invalid::new(
            field("token_endpoint_url"),
            "holds a credential",
            "put the credential in client_id and client_secret",
        ));
    }
    if sasl.client_id.is_empty() {
        return Err(Invalid::new(field("client_id"), "is required for OAUTHBEARER", "set the client's id"));
    }
    if sasl.client_secret.expose().is_empty() {
        return Err(Invalid::new(field("client_secret"), "is required for OAUTHBEARER", "set it, from ${VAR}"));
    }
    for (key, value) in &sasl.extensions {
        // RFC 7628: a key is letters only; `auth` is the token's own.
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphabetic()) || key == "auth" {
            return Err(Invalid::new(
                field(&format!("extensions.{key}")),
                "is not a SASL extension name",
                "use letters only, and not `auth`",
            ));
        }
        if value.contains([',', '=']) || value.chars().any(char::is_control) {
            return Err(Invalid::new(
                field(&format!("extensions.{key}")),
                "holds a comma, an equals sign or a control character",
                "give the value the provider names, without them",
            ));
        }
    }
    Ok(())
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
    if let Some(sasl) = sasl {
        validate_sasl(at, sasl)?;
    }
    for key in client_conf {
        let field = format!("{at}.client_conf.{key}");
        if KAFKA_SECURITY_SETTINGS.contains(key) || key.starts_with("sasl.") {
            let hint = if key.starts_with("sasl.kerberos") {
                "this build supports SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (no Kerberos); \
                 set them with the sink's `sasl` field"
            } else {
                "use the sink's `tls` (ca_file, cert_file, key_file, key_password, verify_hostname) and \
                 `sasl` (mechanism; username and password, or token_endpoint_url, client_id, client_secret, \
                 scope, extensions and token_ca_file for OAUTHBEARER) fields"
            };
            return Err(Invalid::new(field, "is set through the sink's tls and sasl fields", hint));
        }
    }
    Ok(())
}

/// Checks that look at the disk: every file named is readable.
pub fn preflight(tls: Option<&KafkaTls>, sasl: Option<&KafkaSasl>) -> Result<(), (&'static str, String)> {
    crate::registry::readable_files(&[
        ("tls.ca_file", tls.and_then(|t| t.ca_file.as_deref())),
        ("tls.cert_file", tls.and_then(|t| t.cert_file.as_deref())),
        ("tls.key_file", tls.and_then(|t| t.key_file.as_deref())),
        ("sasl.token_ca_file", sasl.and_then(|s| s.token_ca_file.as_deref())),
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
        KafkaSasl {
            mechanism: KafkaSaslMechanism::ScramSha512,
            username: "u".into(),
            password: Secret::new("p"),
            token_endpoint_url: None,
            client_id: String::new(),
            client_secret: Secret::default(),
            scope: None,
            extensions: BTreeMap::new(),
            token_ca_file: None,
        }
    }

    fn oauth() -> KafkaSasl {
        KafkaSasl {
            mechanism: KafkaSaslMechanism::OauthBearer,
            username: String::new(),
            password: Secret::default(),
            token_endpoint_url: Some("https://idp.example.com/token".into()),
            client_id: "sluice".into(),
            client_secret: Secret::new("s3cret"),
            scope: Some("kafka".into()),
            extensions: BTreeMap::from([("logicalCluster".into(), "lkc-1".into()), ("identityPoolId".into(), "pool-2".into())]),
            token_ca_file: Some("/idp-ca.pem".into()),
        }
    }

    #[test]
    fn oauthbearer_asks_librdkafka_for_oidc_tokens() {
        let all = librdkafka_settings(Some(&tls()), Some(&oauth()));
        for wanted in [
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp.example.com/token"),
            ("sasl.oauthbearer.client.id", "sluice"),
            ("sasl.oauthbearer.client.secret", "s3cret"),
            ("sasl.oauthbearer.scope", "kafka"),
            ("sasl.oauthbearer.extensions", "identityPoolId=pool-2,logicalCluster=lkc-1"),
            ("https.ca.location", "/idp-ca.pem"),
        ] {
            assert!(all.contains(&(wanted.0, wanted.1.to_string())), "{wanted:?} in {all:?}");
        }
        assert!(!all.iter().any(|(k, _)| *k == "sasl.username"));
        assert!(validate("s", Some(&tls()), Some(&oauth()), &[]).is_ok());
    }

    #[test]
    fn each_mechanism_takes_only_its_own_fields_and_needs_them() {
        let field = |sasl: KafkaSasl| validate("s", None, Some(&sasl), &[]).unwrap_err().field;
        assert_eq!(field(KafkaSasl { client_id: "x".into(), ..scram() }), "s.sasl.client_id");
        assert_eq!(field(KafkaSasl { username: "u".into(), ..oauth() }), "s.sasl.username");
        assert_eq!(field(KafkaSasl { token_endpoint_url: None, ..oauth() }), "s.sasl.token_endpoint_url");
        assert_eq!(field(KafkaSasl { token_endpoint_url: Some("ftp://x".into()), ..oauth() }), "s.sasl.token_endpoint_url");
        let inline = KafkaSasl { token_endpoint_url: Some("https://id:secret@idp/token".into()), ..oauth() };
        assert_eq!(field(inline), "s.sasl.token_endpoint_url");
        assert_eq!(field(KafkaSasl { client_secret: Secret::default(), ..oauth() }), "s.sasl.client_secret");
        let bad_key = KafkaSasl { extensions: BTreeMap::from([("bad-key".into(), "v".into())]), ..oauth() };
        assert_eq!(field(bad_key), "s.sasl.extensions.bad-key");
        let bad_value = KafkaSasl { extensions: BTreeMap::from([("k".into(), "a,b".into())]), ..oauth() };
        assert_eq!(field(bad_value), "s.sasl.extensions.k");
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
        let oauth_key = validate("s", None, None, &["sasl.oauthbearer.method"]).unwrap_err();
        assert!(oauth_key.hint.contains("token_endpoint_url"), "{oauth_key}");
        assert!(validate("s", Some(&tls()), Some(&scram()), &["ssl.cipher.suites"]).is_ok());
    }
}
