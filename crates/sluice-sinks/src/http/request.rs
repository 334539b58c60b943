//! One request to the receiver, with retries, and what its answer means.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use ring::hmac;
use sluice_core::SinkError;
use tracing::warn;

use super::{HttpMethod, HttpSinkConfig};

/// The part of an error response kept for the message.
const ERROR_BODY_LIMIT: usize = 512;

/// One request's body and what travels beside it.
pub(super) struct Request {
    pub body: Vec<u8>,
    /// `Idempotency-Key`: the event id, or `<first>..<last>` for a batch.
    pub key: String,
    pub content_type: &'static str,
    /// The format's own headers (binary CloudEvents' `ce-*`), in full.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// How the receiver answered a request that did not fail as a whole.
pub(super) enum Answer {
    Delivered,
    /// A 4xx about the request's content: its event is poison.
    Refused(String),
}

pub(super) struct Requester {
    id: String,
    client: reqwest::Client,
    method: reqwest::Method,
    headers: HeaderMap,
    signer: Option<(HeaderName, hmac::Key)>,
    max_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl Requester {
    /// A HEAD request to the part of `url` before its first `${`, with the
    /// sink's headers: the receiver answers, over TLS when asked, and does
    /// not refuse the credentials. Nothing is delivered.
    pub async fn reach(&self, url: &str) -> sluice_core::preflight::Check {
        use sluice_core::preflight::Check;
        let fixed = url.split("${").next().unwrap_or(url);
        let answer = self.client.head(fixed).headers(self.headers.clone()).send().await;
        let shown = sluice_core::redact::credentials(fixed).into_owned();
        match answer {
            Ok(answer) if matches!(answer.status().as_u16(), 401 | 403 | 407) => Check::fail(
                "receiver",
                format!("{shown} refused the credentials: {}", answer.status()),
                "check the headers that carry them",
            ),
            Ok(answer) => Check::ok("receiver", format!("{shown} answered {} to a HEAD request", answer.status())),
            Err(e) => Check::fail(
                "receiver",
                format!("{shown}: {}", sluice_core::redact::credentials(&sluice_core::error::with_causes(e.to_string(), &e))),
                "check the url, that the receiver runs, and ca_file, cert_file and key_file",
            ),
        }
    }

    pub fn new(config: &HttpSinkConfig) -> Result<Self, SinkError> {
        let id = config.id.clone();
        let bad = |field: &str, problem: String| {
            SinkError::permanent(format!("http sink {id:?}: {field}: {problem}"), "fix the sink's config")
        };
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(config.timeout_secs))
            .connect_timeout(Duration::from_secs(config.timeout_secs))
            // A followed redirect turns a POST into a GET; refuse instead.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.ca_file {
            let pem =
                std::fs::read(path).map_err(|e| bad("ca_file", format!("cannot read {}: {e}", path.display())))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| bad("ca_file", format!("{} is not PEM: {e}", path.display())))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) {
            let mut pem =
                std::fs::read(cert).map_err(|e| bad("cert_file", format!("cannot read {}: {e}", cert.display())))?;
            pem.push(b'\n');
            pem.extend(std::fs::read(key).map_err(|e| bad("key_file", format!("cannot read {}: {e}", key.display())))?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                bad("cert_file", format!("{} and {} are not a PEM certificate and key: {e}", cert.display(), key.display()))
            })?;
            builder = builder.identity(identity);
        }
        let client = builder.build().map_err(|e| bad("tls", e.to_string()))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(&format!("headers.{name}"), e.to_string()))?;
            let mut value = HeaderValue::from_str(value.expose())
                .map_err(|_| bad(&format!("headers.{name}"), "the value is not a valid header value".into()))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let signer = if config.signing_secret.expose().is_empty() {
            None
        } else {
            let name = HeaderName::from_bytes(config.signature_header.as_bytes())
                .map_err(|e| bad("signature_header", e.to_string()))?;
            Some((name, hmac::Key::new(hmac::HMAC_SHA256, config.signing_secret.expose().as_bytes())))
        };
        Ok(Self {
            id,
            client,
            method: match config.method {
                HttpMethod::Post => reqwest::Method::POST,
                HttpMethod::Put => reqwest::Method::PUT,
                HttpMethod::Patch => reqwest::Method::PATCH,
            },
            headers,
            signer,
            max_attempts: config.max_attempts,
            initial_backoff: Duration::from_millis(config.initial_backoff_ms),
            max_backoff: Duration::from_secs(config.max_backoff_secs),
        })
    }

    /// Sends `body` until the receiver takes it, refuses it, or
    /// `max_attempts` tries failed.
    pub async fn send(&self, url: &str, request: Request, position: &str) -> Result<Answer, SinkError> {
        let Request { body, key, content_type, headers: extra } = request;
        let mut headers = self.headers.clone();
        let invalid =
            |what: &str| SinkError::transient(format!("http sink {:?}: {what} is not a header value", self.id));
        headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert("idempotency-key", HeaderValue::from_str(&key).map_err(|_| invalid("the idempotency key"))?);
        headers.insert("sluice-position", HeaderValue::from_str(position).map_err(|_| invalid("the position"))?);
        for (name, value) in extra {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid("a format header's name"))?;
            headers.insert(name, HeaderValue::from_bytes(&value).map_err(|_| invalid("a format header"))?);
        }
        if let Some((name, key)) = &self.signer {
            let tag = hmac::sign(key, &body);
            let value = format!("sha256={}", hex(tag.as_ref()));
            headers.insert(name.clone(), HeaderValue::from_str(&value).map_err(|_| invalid("the signature"))?);
        }
        let body = Bytes::from(body);
        let mut backoff = self.initial_backoff;
        let mut last_error = String::new();
        for attempt in 1..=self.max_attempts {
            let request = self.client.request(self.method.clone(), url).headers(headers.clone()).body(body.clone());
            let wait = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        return Ok(Answer::Delivered);
                    }
                    let retry_after = response.headers().get(reqwest::header::RETRY_AFTER).and_then(retry_after);
                    let location = response.headers().get(reqwest::header::LOCATION).cloned();
                    let said = error_body(response).await;
                    let what = format!("{url} answered {status}{said}");
                    match status.as_u16() {
                        408 | 429 | 500..=599 => {
                            last_error = what;
                            retry_after.unwrap_or(backoff)
                        }
                        401 | 403 | 407 => {
                            return Err(SinkError::permanent(
                                format!("http sink {:?}: {what}", self.id),
                                "the receiver refuses the credentials; check the sink's headers",
                            ));
                        }
                        300..=399 => {
                            let to = location.as_ref().and_then(|l| l.to_str().ok()).unwrap_or("nowhere");
                            return Err(SinkError::permanent(
                                format!("http sink {:?}: {what}, redirecting to {to}", self.id),
                                "point url at the final location; the sink does not follow redirects",
                            ));
                        }
                        400..=499 => return Ok(Answer::Refused(what)),
                        _ => {
                            last_error = what;
                            backoff
                        }
                    }
                }
                Err(e) if e.is_builder() => return Ok(Answer::Refused(format!("{url} is not a valid URL: {e}"))),
                Err(e) => {
                    last_error = format!("{url}: {}", describe(&e));
                    backoff
                }
            };
            if attempt < self.max_attempts {
                let wait = wait.min(self.max_backoff);
                warn!(sink = %self.id, attempt, error = %last_error, wait_ms = wait.as_millis() as u64, "http request failed; retrying");
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(self.max_backoff);
            }
        }
        Err(SinkError::transient(format!("http sink {:?}: {last_error} (after {} tries)", self.id, self.max_attempts)))
    }
}

/// `Retry-After` as seconds or as an HTTP date.
fn retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = sluice_core::time::parse_http_date(text)?;
    let now = sluice_core::time::now_us() / 1_000_000;
    Some(Duration::from_secs(at.saturating_sub(now).max(0) as u64))
}

/// The start of an error response's body, for the message.
async fn error_body(mut response: reqwest::Response) -> String {
    let mut kept = Vec::new();
    while kept.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
            _ => break,
        }
    }
    kept.truncate(ERROR_BODY_LIMIT);
    let text = String::from_utf8_lossy(&kept);
    let text = text.trim();
    if text.is_empty() { String::new() } else { format!(": {text}") }
}

fn describe(e: &reqwest::Error) -> String {
    sluice_core::error::with_causes(if e.is_timeout() { "timed out".to_string() } else { e.to_string() }, e)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

