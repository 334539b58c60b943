//! How `sluice run --fleet` instances share pipelines: the `fleet:`
//! section at the top of a config. The store stays in PostgreSQL either
//! way; this section says where the leases live and how long they last.

use std::path::PathBuf;

use serde::Deserialize;
use sluice_core::settings::{Invalid, check_seconds};

pub const DEFAULT_LEASE_TTL_SECS: u64 = 10;
pub const DEFAULT_RENEW_EVERY_SECS: u64 = 3;
pub const DEFAULT_ETCD_PREFIX: &str = "/sluice/";
pub const DEFAULT_ETCD_TIMEOUT_SECS: u64 = 3;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    #[serde(default)]
    pub leases: LeasesConfig,
    /// How long a lease lasts without renewal: how long a stalled owner
    /// keeps its pipelines before another instance takes them.
    #[serde(default = "default_ttl")]
    pub lease_ttl_secs: u64,
    /// How often an instance renews its leases and rebalances.
    #[serde(default = "default_renew")]
    pub renew_every_secs: u64,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            leases: LeasesConfig::Postgres,
            lease_ttl_secs: DEFAULT_LEASE_TTL_SECS,
            renew_every_secs: DEFAULT_RENEW_EVERY_SECS,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "type", content = "config", rename_all = "snake_case", deny_unknown_fields)]
pub enum LeasesConfig {
    /// Rows in the PostgreSQL store, with a session lock per instance.
    #[default]
    Postgres,
    /// Keys under etcd leases; the key's create revision fences.
    Etcd(EtcdConfig),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdConfig {
    /// Client URLs of the cluster's members, tried in order.
    pub endpoints: Vec<String>,
    /// The keys' prefix: several fleets can share one cluster.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// PEM CA that signed the members' certificates (https endpoints).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and key, for clusters that ask for one.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// How long one request may take before the next endpoint is tried.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_ttl() -> u64 {
    DEFAULT_LEASE_TTL_SECS
}
fn default_renew() -> u64 {
    DEFAULT_RENEW_EVERY_SECS
}
fn default_prefix() -> String {
    DEFAULT_ETCD_PREFIX.into()
}
fn default_timeout() -> u64 {
    DEFAULT_ETCD_TIMEOUT_SECS
}

pub(crate) fn validate_fleet(fleet: &FleetConfig) -> Result<(), Invalid> {
    check_seconds("fleet", "lease_ttl_secs", fleet.lease_ttl_secs, 3600)?;
    check_seconds("fleet", "renew_every_secs", fleet.renew_every_secs, 3600)?;
    // Two renewals fit in a lease, so one slow round does not lose it.
    if fleet.renew_every_secs * 2 >= fleet.lease_ttl_secs {
        return Err(Invalid::new(
            "fleet.renew_every_secs",
            format!(
                "{} s leaves no room for a slow round within a lease of {} s",
                fleet.renew_every_secs, fleet.lease_ttl_secs
            ),
            "renew at least twice within a lease: renew_every_secs below half of lease_ttl_secs (the defaults are 3 and 10)",
        ));
    }
    let LeasesConfig::Etcd(etcd) = &fleet.leases else { return Ok(()) };
    let at = "fleet.leases.config";
    if etcd.endpoints.is_empty() {
        return Err(Invalid::new(format!("{at}.endpoints"), "is empty", "list the cluster's client URLs"));
    }
    for (i, endpoint) in etcd.endpoints.iter().enumerate() {
        let field = format!("{at}.endpoints[{i}]");
        let hint = "give each member's client URL, like https://etcd-0:2379, without credentials";
        // Never echoed back: it may hold a password.
        if endpoint.contains('@') {
            return Err(Invalid::new(field, "holds credentials (user:password@)", hint));
        }
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(Invalid::new(field, format!("{endpoint:?} is not an http:// or https:// URL"), hint));
        }
    }
    if etcd.prefix.is_empty() {
        return Err(Invalid::new(format!("{at}.prefix"), "is empty", "set a prefix such as /sluice/"));
    }
    if etcd.cert_file.is_some() != etcd.key_file.is_some() {
        return Err(Invalid::new(
            format!("{at}.cert_file"),
            "a client certificate needs its key, and a key its certificate",
            "set both cert_file and key_file, or neither",
        ));
    }
    let timeout_left = etcd.timeout_secs >= fleet.lease_ttl_secs;
    check_seconds(at, "timeout_secs", etcd.timeout_secs, 3600)?;
    if timeout_left {
        return Err(Invalid::new(
            format!("{at}.timeout_secs"),
            "a request may not take as long as a lease lasts",
            "set timeout_secs below fleet.lease_ttl_secs",
        ));
    }
    Ok(())
}
