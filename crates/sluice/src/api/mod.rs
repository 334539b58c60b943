//! The HTTP API inside `sluice run`: health, pipelines, checkpoints, the
//! dead letter queue, snapshots, Prometheus metrics and the dashboard.
//!
//! Every route but `/health` needs the bearer token when
//! `SLUICE_API_TOKEN` is set. Browsers cannot put a header on a page load
//! or an `EventSource`, so the token is also taken from the
//! `access_token` query parameter (RFC 6750, section 2.3).

mod metrics;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::anyhow;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sluice_config::Config;
use sluice_runtime::PipelineStatus;
use sluice_store::EmbeddedStore;
use tokio::net::TcpListener;
use tracing::{error, info};

pub use self::metrics::install as install_metrics;

/// The environment variable that holds the API's bearer token.
pub const TOKEN_ENV: &str = "SLUICE_API_TOKEN";

/// What the handlers share.
pub struct Api {
    pub config: Config,
    pub pipelines: Vec<Arc<PipelineStatus>>,
    pub store: Arc<EmbeddedStore>,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    pub token: Option<String>,
}

impl Api {
    fn pipeline(&self, name: &str) -> Option<&Arc<PipelineStatus>> {
        self.pipelines.iter().find(|p| p.name == name)
    }
}

/// Binds the API's address; a failure is bad input, reported before any
/// pipeline starts.
pub async fn bind(addr: &str) -> Result<TcpListener, anyhow::Error> {
    let parsed: SocketAddr = addr
        .parse()
        .map_err(|e| anyhow!("--api-addr {addr:?}: {e}; hint: give an address and port like 127.0.0.1:8080"))?;
    TcpListener::bind(parsed).await.map_err(|e| {
        anyhow!(
            "--api-addr {addr}: cannot listen: {e}; hint: pick a free port, or `--api-addr off` to run without the API"
        )
    })
}

/// Serves the API on `listener` until the process ends.
pub fn serve(listener: TcpListener, api: Arc<Api>) -> tokio::task::JoinHandle<()> {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, auth = api.token.is_some(), "HTTP API listening");
    }
    let app =
        routes::router().layer(axum::middleware::from_fn_with_state(api.clone(), authorize)).with_state(api.clone());
    let upkeep = api.metrics.clone();
    tokio::spawn(async move {
        // The exporter drains histogram samples only on upkeep; without
        // it they pile up between scrapes.
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            error!(error = %e, "HTTP API stopped");
        }
    })
}

async fn authorize(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    let Some(token) = &api.token else { return next.run(request).await };
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let from_header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let from_query =
        request.uri().query().and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("access_token=")));
    let given = from_header.or(from_query);
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

/// Compares without stopping at the first difference, so response times
/// do not reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
