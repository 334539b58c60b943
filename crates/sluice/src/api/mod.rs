//! The HTTP API inside `sluice run`: health, pipelines, checkpoints, the
//! dead letter queue, snapshots, Prometheus metrics and the dashboard.
//!
//! Every route but `/health` needs the bearer token when
//! `SLUICE_API_TOKEN` is set. Browsers cannot put a header on a page load
//! or an `EventSource`, so the token is also taken from the
//! `access_token` query parameter (RFC 6750, section 2.3). Token or not,
//! [`guard`] refuses requests that other web pages could make.

mod guard;
mod history;
mod metrics;
mod routes;

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError, RwLock};

use anyhow::anyhow;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sluice_config::Config;
use sluice_runtime::{PipelineHandle, PipelineStatus};
use sluice_store::Store;
use tokio::net::TcpListener;
use tracing::{error, info};

pub use self::guard::AllowedHosts;
pub use self::metrics::install as install_metrics;

/// The environment variable that holds the API's bearer token.
pub const TOKEN_ENV: &str = "SLUICE_API_TOKEN";

/// The config the process runs and its pipelines, swapped whole by a
/// reload.
pub struct Catalog {
    pub config: RwLock<Config>,
    /// Every pipeline of the process: its figures for the read-only
    /// routes, its controls for pause, resume and redelivery.
    pub pipelines: RwLock<Vec<PipelineHandle>>,
}

impl Catalog {
    pub fn new(config: Config, pipelines: Vec<PipelineHandle>) -> Arc<Self> {
        Arc::new(Catalog { config: RwLock::new(config), pipelines: RwLock::new(pipelines) })
    }

    pub fn config(&self) -> Config {
        self.config.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn handles(&self) -> Vec<PipelineHandle> {
        self.pipelines.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn replace(&self, config: Config, pipelines: Vec<PipelineHandle>) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = config;
        *self.pipelines.write().unwrap_or_else(PoisonError::into_inner) = pipelines;
    }
}

/// What the handlers share.
pub struct Api {
    pub catalog: Arc<Catalog>,
    /// Applies the config on disk anew (`POST /reload`).
    pub reloader: Arc<crate::reload::Reloader>,
    pub store: Arc<dyn Store>,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    pub token: Option<String>,
    /// The last hour of figures, for the dashboard's charts.
    pub history: history::History,
}

impl Api {
    fn pipeline(&self, name: &str) -> Option<PipelineHandle> {
        self.catalog.handles().into_iter().find(|p| p.status.name == name)
    }

    fn status(&self, name: &str) -> Option<Arc<PipelineStatus>> {
        self.pipeline(name).map(|p| p.status)
    }

    fn statuses(&self) -> Vec<Arc<PipelineStatus>> {
        self.catalog.handles().into_iter().map(|p| p.status).collect()
    }
}

/// Binds the API's address; a failure is bad input, reported before the
/// data dir is opened or any pipeline starts. Blocking, so it can run
/// before the async runtime exists.
pub fn bind(addr: &str) -> Result<std::net::TcpListener, anyhow::Error> {
    let parsed: SocketAddr = addr
        .parse()
        .map_err(|e| anyhow!("--api-addr {addr:?}: {e}; hint: give an address and port like 127.0.0.1:8080"))?;
    let cannot_listen = |e: std::io::Error| {
        anyhow!(
            "--api-addr {addr}: cannot listen: {e}; hint: pick a free port, or `--api-addr off` to run without the API"
        )
    };
    let listener = std::net::TcpListener::bind(parsed).map_err(cannot_listen)?;
    listener.set_nonblocking(true).map_err(cannot_listen)?;
    Ok(listener)
}

/// Serves the API on `listener` until the process ends; `hosts` are the
/// names it answers to besides its address.
pub fn serve(
    listener: std::net::TcpListener,
    hosts: AllowedHosts,
    api: Arc<Api>,
) -> Result<tokio::task::JoinHandle<()>, anyhow::Error> {
    let addr = listener.local_addr().map_err(|e| anyhow!("the API's listener has no address: {e}"))?;
    let listener = TcpListener::from_std(listener).map_err(|e| anyhow!("--api-addr {addr}: cannot listen: {e}"))?;
    info!(%addr, auth = api.token.is_some(), "HTTP API listening");
    let guard = Arc::new(guard::Guard::new(addr, hosts));
    // The outer layer runs first: requests other pages could forge are
    // refused before the token is even looked at.
    let app = routes::router()
        .layer(axum::middleware::from_fn_with_state(api.clone(), authorize))
        .layer(axum::middleware::from_fn_with_state(guard, guard::check))
        .with_state(api.clone());
    let sampled = api.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(history::EVERY);
        loop {
            tick.tick().await;
            let views: Vec<_> = sampled.statuses().iter().map(|p| p.view()).collect();
            sampled.history.record(&views, sluice_core::time::now_us());
        }
    });
    let upkeep = api.metrics.clone();
    tokio::spawn(async move {
        // The exporter keeps every histogram sample until an upkeep folds
        // them into the buckets. Its one histogram left is the batch size,
        // a sample per batch; the per-event latency is counted by the
        // writers themselves (sluice_runtime::latency_buckets).
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            error!(error = %e, "HTTP API stopped");
        }
    }))
}

async fn authorize(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    let Some(token) = &api.token else { return next.run(request).await };
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let from_header = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer);
    let given = from_header.map(str::to_string).or_else(|| query_token(request.uri()));
    if given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes())) {
        return next.run(request).await;
    }
    let mut response = routes::error(
        StatusCode::UNAUTHORIZED,
        format!("missing or wrong bearer token; send `Authorization: Bearer <token>` with the token in {TOKEN_ENV}"),
    )
    .into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

/// The token of an `Authorization: Bearer <token>` value; the scheme name
/// is case-insensitive (RFC 7235, section 2.1).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The `access_token` query parameter, decoded as the form encoding RFC
/// 6750 (section 2.3) prescribes, so a token with `+`, `/` or `=` works
/// when a client (the dashboard's `encodeURIComponent`) encodes it.
fn query_token(uri: &axum::http::Uri) -> Option<String> {
    let axum::extract::Query(pairs) = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri).ok()?;
    pairs.into_iter().find_map(|(name, value)| (name == "access_token").then_some(value))
}

/// Compares without stopping at the first difference, so response times
/// do not reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in ["Bearer abc", "bearer abc", "BEARER abc", "  bEaReR   abc "] {
            assert_eq!(bearer(value), Some("abc"), "{value}");
        }
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearerabc"), None);
    }

    #[test]
    fn the_query_token_is_percent_decoded() {
        let uri: axum::http::Uri = "/events?x=1&access_token=a%2Bb%2Fc%3D%26d+e".parse().unwrap();
        assert_eq!(query_token(&uri).as_deref(), Some("a+b/c=&d e"));
        let plain: axum::http::Uri = "/?access_token=plain".parse().unwrap();
        assert_eq!(query_token(&plain).as_deref(), Some("plain"));
        assert_eq!(query_token(&"/?other=1".parse().unwrap()), None);
    }
}
