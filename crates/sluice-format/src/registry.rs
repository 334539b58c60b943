//! The `schema_registry:` block of a format: where the registry is and how
//! to log in to it.

use std::path::PathBuf;

use serde::Deserialize;
use sluice_core::settings::{Invalid, Secret, check_seconds};

/// Limit on one request to the registry (s).
pub const DEFAULT_REGISTRY_TIMEOUT_SECS: u64 = 10;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// The registry's Confluent-compatible API: `https://host/` for
    /// Confluent, `http://host:8080/apis/ccompat/v7` for Apicurio.
    pub url: String,
    /// Basic auth (Confluent Cloud: the API key and secret).
    pub username: Option<String>,
    #[serde(default)]
    pub password: Secret,
    /// A bearer token instead of basic auth.
    #[serde(default)]
    pub bearer_token: Secret,
    /// PEM CA certificates trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_REGISTRY_TIMEOUT_SECS
}

impl RegistryConfig {
    /// A registry at `url`, with the defaults.
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            username: None,
            password: Secret::default(),
            bearer_token: Secret::default(),
            ca_file: None,
            timeout_secs: DEFAULT_REGISTRY_TIMEOUT_SECS,
        }
    }

    /// `at` is the config path of the block; errors name its fields.
    pub fn validate(&self, at: &str) -> Result<(), Invalid> {
        let rest = self.url.strip_prefix("http://").or_else(|| self.url.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
            return Err(Invalid::new(
                format!("{at}.url"),
                format!("{:?} is not an http:// or https:// URL", sluice_core::redact::credentials(&self.url)),
                "write the registry's API base, such as https://registry.example:8081",
            ));
        }
        if self.username.is_some() && !self.bearer_token.expose().is_empty() {
            return Err(Invalid::new(
                format!("{at}.bearer_token"),
                "is set beside username: a registry takes one way to log in",
                "keep username and password, or bearer_token",
            ));
        }
        if self.username.is_none() && !self.password.expose().is_empty() {
            return Err(Invalid::new(format!("{at}.password"), "is set without username", "set username too"));
        }
        check_seconds(at, "timeout_secs", self.timeout_secs, 3600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_or_two_logins_are_refused_by_field() {
        assert_eq!(RegistryConfig::at("ftp://r").validate("s").unwrap_err().field, "s.url");
        let mut both = RegistryConfig::at("http://r:8081");
        both.username = Some("u".into());
        both.bearer_token = Secret::new("t");
        assert_eq!(both.validate("s").unwrap_err().field, "s.bearer_token");
        assert!(RegistryConfig::at("https://r").validate("s").is_ok());
    }
}
