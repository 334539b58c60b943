//! The requests Sluice makes of a registry, and its cache of schema ids.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_core::sync::lock;

use crate::{RegistryConfig, RegistryError};

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

enum Auth {
    None,
    Basic(String, String),
    Bearer(String),
}

/// A registry, with the ids of the schemas this process registered or
/// looked up, so each is asked for once.
pub struct Registry {
    base: String,
    /// The URL with any credentials in it masked, for messages.
    shown: String,
    client: reqwest::Client,
    auth: Auth,
    ids: Mutex<HashMap<(String, String), u32>>,
}

impl Registry {
    pub fn new(config: &RegistryConfig) -> Result<Self, RegistryError> {
        let shown = sluice_core::redact::credentials(&config.url).into_owned();
        let bad = |detail: String| RegistryError::Unexpected { url: shown.clone(), detail };
        let timeout = Duration::from_secs(config.timeout_secs);
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read ca_file {}: {e}", path.display())))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| bad(format!("ca_file {} is not PEM: {e}", path.display())))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build().map_err(|e| bad(format!("cannot make an HTTP client: {e}")))?;
        let auth = match (&config.username, config.bearer_token.expose()) {
            (Some(user), _) => Auth::Basic(user.clone(), config.password.expose().to_string()),
            (None, token) if !token.is_empty() => Auth::Bearer(token.to_string()),
            _ => Auth::None,
        };
        Ok(Self {
            base: config.url.trim_end_matches('/').to_string(),
            shown,
            client,
            auth,
            ids: Mutex::new(HashMap::new()),
        })
    }

    /// The id of `schema` (Avro, as JSON text) under `subject`,
    /// registering it when the subject lacks it.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let key = (subject.to_string(), schema.to_string());
        if let Some(id) = lock(&self.ids).get(&key) {
            return Ok(*id);
        }
        let path = format!("/subjects/{}/versions", segment(subject));
        let (status, body) = self.call(reqwest::Method::POST, &path, Some(json!({ "schema": schema }))).await?;
        let id = self.id_of(status, &body)?;
        lock(&self.ids).insert(key, id);
        Ok(id)
    }

    /// The id of `schema` under `subject` if the subject holds it; never
    /// registers.
    pub async fn lookup(&self, subject: &str, schema: &str) -> Result<Option<u32>, RegistryError> {
        let key = (subject.to_string(), schema.to_string());
        if let Some(id) = lock(&self.ids).get(&key) {
            return Ok(Some(*id));
        }
        let path = format!("/subjects/{}", segment(subject));
        let (status, body) = self.call(reqwest::Method::POST, &path, Some(json!({ "schema": schema }))).await?;
        if status == 404 {
            return Ok(None);
        }
        let id = self.id_of(status, &body)?;
        lock(&self.ids).insert(key, id);
        Ok(Some(id))
    }

    /// Whether `schema` may follow the latest version of `subject` under
    /// the subject's compatibility level; a subject with no version yet
    /// takes anything.
    pub async fn is_compatible(&self, subject: &str, schema: &str) -> Result<bool, RegistryError> {
        let path = format!("/compatibility/subjects/{}/versions/latest", segment(subject));
        let (status, body) = self.call(reqwest::Method::POST, &path, Some(json!({ "schema": schema }))).await?;
        match (status, body.get("is_compatible").and_then(Value::as_bool)) {
            (404, _) => Ok(true),
            (200, Some(answer)) => Ok(answer),
            _ => Err(self.refused(status, &body)),
        }
    }

    /// The compatibility level of `subject` (`BACKWARD`, `FULL`, `NONE`,
    /// …), or the registry's own where the subject has none.
    pub async fn compatibility(&self, subject: &str) -> Result<String, RegistryError> {
        let path = format!("/config/{}?defaultToGlobal=true", segment(subject));
        let (status, body) = self.call(reqwest::Method::GET, &path, None).await?;
        if status == 404 {
            return self.global_compatibility().await;
        }
        match body.get("compatibilityLevel").and_then(Value::as_str) {
            Some(level) if status == 200 => Ok(level.to_string()),
            _ => Err(self.refused(status, &body)),
        }
    }

    /// The registry's own compatibility level; also the cheapest call
    /// that shows the registry answers and takes the credentials.
    pub async fn global_compatibility(&self) -> Result<String, RegistryError> {
        let (status, body) = self.call(reqwest::Method::GET, "/config", None).await?;
        match body.get("compatibilityLevel").and_then(Value::as_str) {
            Some(level) if status == 200 => Ok(level.to_string()),
            _ => Err(self.refused(status, &body)),
        }
    }

    /// The schema text of the latest version of `subject`; `None` for a
    /// subject with no version.
    pub async fn latest(&self, subject: &str) -> Result<Option<String>, RegistryError> {
        let path = format!("/subjects/{}/versions/latest", segment(subject));
        let (status, body) = self.call(reqwest::Method::GET, &path, None).await?;
        match body.get("schema").and_then(Value::as_str) {
            _ if status == 404 => Ok(None),
            Some(schema) if status == 200 => Ok(Some(schema.to_string())),
            _ => Err(self.refused(status, &body)),
        }
    }

    /// The schema text of `id`.
    pub async fn schema(&self, id: u32) -> Result<String, RegistryError> {
        let (status, body) = self.call(reqwest::Method::GET, &format!("/schemas/ids/{id}"), None).await?;
        match body.get("schema").and_then(Value::as_str) {
            Some(schema) if status == 200 => Ok(schema.to_string()),
            _ => Err(self.refused(status, &body)),
        }
    }

    fn id_of(&self, status: u16, body: &Value) -> Result<u32, RegistryError> {
        match body.get("id").and_then(Value::as_u64).and_then(|id| u32::try_from(id).ok()) {
            Some(id) if status == 200 => Ok(id),
            _ => Err(self.refused(status, body)),
        }
    }

    fn refused(&self, status: u16, body: &Value) -> RegistryError {
        let message = body.get("message").and_then(Value::as_str).map_or_else(|| body.to_string(), str::to_string);
        let code = body.get("error_code").and_then(Value::as_i64).unwrap_or(i64::from(status));
        RegistryError::Refused { url: self.shown.clone(), status, code, message }
    }

    /// One request; the status and the JSON answer of anything but a
    /// failure to reach the registry, a 5xx, or refused credentials.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), RegistryError> {
        let unavailable = |detail: String| RegistryError::Unavailable { url: self.shown.clone(), detail };
        let mut request = self.client.request(method, format!("{}{path}", self.base)).header("Accept", CONTENT_TYPE);
        request = match &self.auth {
            Auth::None => request,
            Auth::Basic(user, password) => request.basic_auth(user, Some(password)),
            Auth::Bearer(token) => request.bearer_auth(token),
        };
        if let Some(body) = body {
            request = request.header("Content-Type", CONTENT_TYPE).body(body.to_string());
        }
        let response = request.send().await.map_err(|e| unavailable(describe(&e)))?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| unavailable(describe(&e)))?;
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "message": text.trim() }));
        let message = || body.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
        match status {
            500..=599 => Err(unavailable(format!("answered {status}: {}", message()))),
            401 | 403 => Err(RegistryError::Unauthorized { url: self.shown.clone(), status, message: message() }),
            _ => Ok((status, body)),
        }
    }
}

/// A subject as one path segment: letters, digits and `-._~` as they are,
/// the rest percent-encoded.
fn segment(subject: &str) -> String {
    let mut out = String::with_capacity(subject.len());
    for byte in subject.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// An error with its causes (a refused connection, a timeout).
fn describe(e: &reqwest::Error) -> String {
    let text = sluice_core::error::with_causes(if e.is_timeout() { "timed out".to_string() } else { e.to_string() }, e);
    sluice_core::redact::credentials(&text).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn subjects_are_one_path_segment() {
        assert_eq!(super::segment("shop.public.orders-value"), "shop.public.orders-value");
        assert_eq!(super::segment("a/b c"), "a%2Fb%20c");
    }
}
