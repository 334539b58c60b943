//! Leases in etcd, through its JSON gateway (`/v3/...` on the client
//! port), for fleets that already run a cluster.
//!
//! Each instance holds one etcd lease of the fleet's TTL, kept alive every
//! round. Its member key and the key of every pipeline it owns hang on
//! that lease, so when the instance dies or stalls past the TTL, etcd
//! deletes them all. A pipeline's key is created in a transaction that
//! succeeds only if it does not exist; the revision that created it is
//! the lease's epoch: it grows with every acquisition. The new owner
//! raises the store's fence to it before starting the pipeline, so the
//! checkpoint commits of an owner that lost the key are refused.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, anyhow};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use sluice_config::EtcdConfig;
use sluice_core::StoreError;
use sluice_store::{Lease, LeaseRow, PgStore, Taken};
use tracing::warn;

use super::leases::{Leases, blocking};

/// The cluster's JSON gateway, through each member in turn.
pub struct Gateway {
    client: reqwest::Client,
    endpoints: Vec<String>,
}

pub struct EtcdLeases {
    gateway: Gateway,
    prefix: String,
    store: PgStore,
    instance: String,
    /// This instance's etcd lease, once granted; a new one replaces it
    /// when it expired (the instance stalled past it).
    lease: Mutex<Option<i64>>,
}

/// What a pipeline's key holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Holder {
    owner: String,
    config: String,
    since_us: i64,
}

impl Gateway {
    pub fn new(config: &EtcdConfig) -> anyhow::Result<Self> {
        let timeout = Duration::from_secs(config.timeout_secs);
        let mut builder = reqwest::Client::builder().timeout(timeout).connect_timeout(timeout);
        let at = "fleet.leases.config";
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).with_context(|| format!("{at}.ca_file: cannot read {}", path.display()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("{at}.ca_file: {} is not PEM", path.display()))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) {
            let mut pem =
                std::fs::read(cert).with_context(|| format!("{at}.cert_file: cannot read {}", cert.display()))?;
            pem.push(b'\n');
            pem.extend(std::fs::read(key).with_context(|| format!("{at}.key_file: cannot read {}", key.display()))?);
            let identity = reqwest::Identity::from_pem(&pem).with_context(|| {
                format!("{at}.cert_file: {} and {} are not a PEM pair", cert.display(), key.display())
            })?;
            builder = builder.identity(identity);
        }
        let client = builder.build().map_err(|e| anyhow!("{at}: {e}"))?;
        let endpoints = config.endpoints.iter().map(|e| e.trim_end_matches('/').to_string()).collect();
        Ok(Gateway { client, endpoints })
    }

    /// One gateway call, to each endpoint in turn until one answers. An
    /// answer with an error is returned as it is: another member would
    /// give the same.
    pub async fn call(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let mut failures = Vec::new();
        for endpoint in &self.endpoints {
            let url = format!("{endpoint}/v3/{path}");
            let sent = self
                .client
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string())
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(e) => {
                    failures.push(format!("{endpoint}: {}", sluice_core::error::with_causes(e.to_string(), &e)));
                    continue;
                }
            };
            let status = response.status();
            let answer = match response.bytes().await.map(|b| serde_json::from_slice::<Value>(&b)) {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => {
                    failures.push(format!("{endpoint}: an answer that is not JSON ({status}): {e}"));
                    continue;
                }
                Err(e) => {
                    failures.push(format!("{endpoint}: the answer broke off ({status}): {e}"));
                    continue;
                }
            };
            if let Some(error) = answer.get("error") {
                return Err(anyhow!("etcd at {endpoint} refused {path}: {error}"));
            }
            return Ok(answer);
        }
        Err(anyhow!(
            "no etcd endpoint answered {path} ({}); hint: check fleet.leases.config.endpoints and that the cluster runs",
            failures.join("; ")
        ))
    }

    /// The keys under `prefix`.
    async fn range(&self, prefix: &str) -> anyhow::Result<Vec<Value>> {
        let answer = self.call("kv/range", json!({ "key": b64(prefix), "range_end": b64(prefix_end(prefix)) })).await?;
        Ok(answer["kvs"].as_array().cloned().unwrap_or_default())
    }
}

/// `sluice validate --connect`: the cluster answers, and what it holds
/// under the fleet's prefix.
pub async fn checks(config: &EtcdConfig) -> Vec<sluice_core::preflight::Check> {
    use sluice_core::preflight::Check;
    let hint = "check fleet.leases.config: the endpoints, and the CA and client certificate the cluster asks for";
    let gateway = match Gateway::new(config) {
        Ok(gateway) => gateway,
        Err(e) => return vec![Check::fail("client", format!("{e:#}"), hint)],
    };
    match gateway.range(&format!("{}leases/", config.prefix)).await {
        Ok(leases) => {
            vec![Check::ok("leases", format!("the cluster answers; {} lease(s) under {}", leases.len(), config.prefix))]
        }
        Err(e) => vec![Check::fail("leases", format!("{e:#}"), hint)],
    }
}

impl EtcdLeases {
    pub fn new(config: &EtcdConfig, store: PgStore, instance: String) -> anyhow::Result<Self> {
        let gateway = Gateway::new(config)?;
        Ok(EtcdLeases { gateway, prefix: config.prefix.clone(), store, instance, lease: Mutex::new(None) })
    }

    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}/{name}", self.prefix)
    }

    async fn call(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.gateway.call(path, body).await
    }

    /// This instance's etcd lease: the current one kept alive, or a new
    /// one when there is none or it expired.
    async fn own_lease(&self, ttl: Duration) -> anyhow::Result<i64> {
        let current = *self.lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(id) = current {
            let answer = self.call("lease/keepalive", json!({ "ID": id.to_string() })).await?;
            if number(&answer["result"]["TTL"]) > 0 {
                return Ok(id);
            }
            warn!(lease = id, "this instance's etcd lease expired (it stalled or was cut off); taking a new one");
        }
        let answer = self.call("lease/grant", json!({ "TTL": ttl.as_secs().max(1) })).await?;
        let id = number(&answer["ID"]);
        if id == 0 {
            return Err(anyhow!("etcd granted no lease: {answer}"));
        }
        *self.lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(id);
        Ok(id)
    }

    async fn range(&self, prefix: &str) -> anyhow::Result<Vec<Value>> {
        self.gateway.range(prefix).await
    }
}

impl Leases for EtcdLeases {
    fn heartbeat(&self, ttl: Duration) -> BoxFuture<'_, anyhow::Result<usize>> {
        Box::pin(async move {
            let lease = self.own_lease(ttl).await?;
            let member = self.key("members", &self.instance);
            self.call(
                "kv/put",
                json!({ "key": b64(&member), "value": b64(&self.instance), "lease": lease.to_string() }),
            )
            .await?;
            Ok(self.range(&self.key("members", "")).await?.len().max(1))
        })
    }

    fn try_acquire<'a>(
        &'a self,
        pipeline: &'a str,
        config: &'a str,
        _ttl: Duration,
    ) -> BoxFuture<'a, anyhow::Result<Taken>> {
        Box::pin(async move {
            let Some(lease) = *self.lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner) else {
                return Ok(Taken::Held);
            };
            let key = b64(self.key("leases", pipeline));
            let holder = Holder {
                owner: self.instance.clone(),
                config: config.to_string(),
                since_us: sluice_core::time::now_us() as i64,
            };
            let value = b64(serde_json::to_string(&holder).unwrap_or_default());
            let answer = self
                .call(
                    "kv/txn",
                    json!({
                        "compare": [{ "key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
                        "success": [{ "request_put": { "key": key, "value": value, "lease": lease.to_string() } }],
                        "failure": [{ "request_range": { "key": key } }],
                    }),
                )
                .await?;
            if answer["succeeded"] != Value::Bool(true) {
                let held = &answer["responses"][0]["response_range"]["kvs"][0];
                let other = holder_of(held);
                return Ok(match other {
                    Some(other) if other.owner != self.instance && other.config != config => {
                        Taken::OtherConfig { owner: other.owner }
                    }
                    _ => Taken::Held,
                });
            }
            let taken = Lease { pipeline: pipeline.to_string(), epoch: number(&answer["header"]["revision"]) };
            let (store, fence, instance) = (self.store.clone(), taken.clone(), self.instance.clone());
            if let Err(e) = blocking(move || store.raise_fence(&fence, &instance)).await {
                // Without the fence the lease cannot be used; let it go.
                let _ = self.release(&taken).await;
                return Err(match e.downcast_ref::<StoreError>() {
                    Some(StoreError::Fenced { current, held, .. }) => anyhow!(
                        "pipeline {pipeline}: the store's fence is at epoch {current}, above etcd's revision {held}: etcd's revisions started again (a new cluster?) under a store that an older one fenced; hint: stop every instance, then delete the pipelines' rows from the store schema's leases table"
                    ),
                    _ => e,
                });
            }
            Ok(Taken::Lease(taken))
        })
    }

    fn renew<'a>(&'a self, lease: &'a Lease, _ttl: Duration) -> BoxFuture<'a, anyhow::Result<bool>> {
        // The heartbeat keeps the instance's etcd lease alive; the key is
        // ours while it exists at the revision that created it.
        Box::pin(async move {
            let answer = self.call("kv/range", json!({ "key": b64(self.key("leases", &lease.pipeline)) })).await?;
            let kv = &answer["kvs"][0];
            let ours = holder_of(kv).is_some_and(|h| h.owner == self.instance);
            Ok(ours && number(&kv["create_revision"]) == lease.epoch)
        })
    }

    fn release<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let key = b64(self.key("leases", &lease.pipeline));
            self.call(
                "kv/txn",
                json!({
                    "compare": [{ "key": key, "target": "CREATE", "result": "EQUAL", "create_revision": lease.epoch.to_string() }],
                    "success": [{ "request_delete_range": { "key": key } }],
                }),
            )
            .await?;
            Ok(())
        })
    }

    fn list(&self) -> BoxFuture<'_, anyhow::Result<Vec<LeaseRow>>> {
        Box::pin(async move {
            let prefix = self.key("leases", "");
            let rows = self.range(&prefix).await?;
            Ok(rows
                .iter()
                .filter_map(|kv| {
                    let key = String::from_utf8(B64.decode(kv["key"].as_str()?).ok()?).ok()?;
                    let holder = holder_of(kv)?;
                    Some(LeaseRow {
                        pipeline: key.strip_prefix(&prefix)?.to_string(),
                        owner: holder.owner,
                        epoch: number(&kv["create_revision"]),
                        acquired_at_us: holder.since_us,
                        live: true,
                    })
                })
                .collect())
        })
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let lease = self.lease.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            if let Some(id) = lease {
                // Its keys go with it; if this fails they expire within a TTL.
                if let Err(e) = self.call("lease/revoke", json!({ "ID": id.to_string() })).await {
                    warn!(error = %e, "cannot revoke this instance's etcd lease; its keys expire by themselves");
                }
            }
        })
    }
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    B64.encode(bytes)
}

/// The gateway writes 64-bit integers as strings, and leaves out zeros.
fn number(value: &Value) -> i64 {
    match value {
        Value::String(text) => text.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The key just past every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut bytes = prefix.as_bytes().to_vec();
    while let Some(last) = bytes.pop() {
        if last < 0xff {
            bytes.push(last + 1);
            return bytes;
        }
    }
    // All 0xff (or empty): etcd reads "\0" as "to the end of the keys".
    vec![0]
}

fn holder_of(kv: &Value) -> Option<Holder> {
    let value = B64.decode(kv["value"].as_str()?).ok()?;
    serde_json::from_slice(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_of_a_prefix_ends_just_past_it() {
        assert_eq!(prefix_end("/sluice/leases/"), b"/sluice/leases0");
        assert_eq!(number(&json!("42")), 42);
        assert_eq!(number(&Value::Null), 0);
    }
}
