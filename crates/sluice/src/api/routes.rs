//! The API's routes. `docs/api.md` describes them and `openapi.json`
//! gives their shapes; the tests hold every response against it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_config::SourceConfig;
use sluice_core::{CheckpointKey, DeadLetter};
use sluice_runtime::status::PipelineState;
use sluice_runtime::{ReattachError, RedeliverError};

use super::Api;

type Shared = State<Arc<Api>>;

pub const OPENAPI: &str = include_str!("openapi.json");
const DASHBOARD: &str = include_str!("dashboard.html");

pub fn router() -> Router<Arc<Api>> {
    Router::new()
        .route("/", get(|| async { Html(DASHBOARD) }))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(super::metrics::render))
        .route("/openapi.json", get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }))
        .route("/events", get(events))
        .route("/pipelines", get(pipelines))
        .route("/pipelines/{name}", get(pipeline))
        .route("/pipelines/{name}/pause", post(pause))
        .route("/pipelines/{name}/resume", post(resume))
        .route("/pipelines/{name}/sinks/{sink}/reattach", post(reattach))
        .route("/pipelines/{name}/checkpoints", get(checkpoints))
        .route("/pipelines/{name}/history", get(history))
        .route("/pipelines/{name}/snapshot", get(snapshot_progress).post(snapshot_start))
        .route("/reload", post(reload))
        .route("/dlq", get(dlq_list))
        .route("/dlq/{key}", get(dlq_show).delete(dlq_purge))
        .route("/dlq/{key}/retry", post(dlq_retry))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route; see /openapi.json".to_string()) })
}

/// Every error body: `{"error": "..."}`.
pub fn error(status: StatusCode, message: String) -> (StatusCode, Json<Value>) {
    (status, Json(json!({ "error": message })))
}

fn no_pipeline(api: &Api, name: &str) -> (StatusCode, Json<Value>) {
    let statuses = api.statuses();
    let names: Vec<&str> = statuses.iter().map(|p| p.name.as_str()).collect();
    error(StatusCode::NOT_FOUND, format!("no pipeline named {name:?}; the pipelines are {names:?}"))
}

fn store_error(e: impl std::fmt::Display) -> (StatusCode, Json<Value>) {
    error(StatusCode::INTERNAL_SERVER_ERROR, format!("the checkpoint store failed: {e}"))
}

/// Alive, and no pipeline failed: a failed pipeline ends the process, so
/// this only fails in the moments before it exits.
async fn health(State(api): Shared) -> Response {
    let statuses = api.statuses();
    let pipelines: Vec<Value> = statuses.iter().map(|p| json!({ "name": p.name, "state": p.state() })).collect();
    let failed = statuses.iter().any(|p| p.state() == PipelineState::Failed);
    let status = if failed { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (status, Json(json!({ "status": if failed { "failed" } else { "alive" }, "pipelines": pipelines }))).into_response()
}

async fn ready(State(api): Shared) -> Response {
    let pipelines: Vec<Value> =
        api.statuses().iter().map(|p| json!({ "name": p.name, "problems": p.problems() })).collect();
    let ready = pipelines.iter().all(|p| p["problems"].as_array().is_some_and(Vec::is_empty));
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(json!({ "ready": ready, "pipelines": pipelines }))).into_response()
}

async fn pipelines(State(api): Shared) -> Json<Value> {
    let views: Vec<_> = api.statuses().iter().map(|p| p.view()).collect();
    Json(json!({ "pipelines": views }))
}

async fn pipeline(State(api): Shared, Path(name): Path<String>) -> Response {
    match api.status(&name) {
        Some(p) => Json(p.view()).into_response(),
        None => no_pipeline(&api, &name).into_response(),
    }
}

async fn pause(State(api): Shared, Path(name): Path<String>) -> Response {
    let Some(p) = api.pipeline(&name) else { return no_pipeline(&api, &name).into_response() };
    if p.status.state() == PipelineState::Standby {
        let owner =
            p.status.owner().map_or_else(|| "no instance yet".to_string(), |o| format!("instance {:?}", o.instance));
        return error(StatusCode::CONFLICT, format!("pipeline {name:?} runs on {owner} of the fleet; pause it there"))
            .into_response();
    }
    if matches!(p.status.state(), PipelineState::Stopped | PipelineState::Failed) {
        return error(StatusCode::CONFLICT, format!("pipeline {name:?} is not running")).into_response();
    }
    let changed = p.control.pause();
    Json(json!({ "name": name, "paused": true, "changed": changed })).into_response()
}

async fn resume(State(api): Shared, Path(name): Path<String>) -> Response {
    let Some(p) = api.pipeline(&name) else { return no_pipeline(&api, &name).into_response() };
    let changed = p.control.resume();
    Json(json!({ "name": name, "paused": false, "changed": changed })).into_response()
}

/// Probes a detached sink now; the answer says whether it reattached.
async fn reattach(State(api): Shared, Path((name, sink)): Path<(String, String)>) -> Response {
    let Some(p) = api.pipeline(&name) else { return no_pipeline(&api, &name).into_response() };
    let answer = tokio::time::timeout(Duration::from_secs(300), p.control.reattach(&sink)).await;
    match answer {
        Ok(Ok(message)) => Json(json!({ "pipeline": name, "sink": sink, "message": message })).into_response(),
        Ok(Err(ReattachError::NoSuchSink)) => {
            let sinks: Vec<&str> = p.status.sinks.iter().map(|s| s.id.as_str()).collect();
            error(StatusCode::NOT_FOUND, format!("pipeline {name:?} has no sink {sink:?}; its sinks are {sinks:?}"))
                .into_response()
        }
        Ok(Err(ReattachError::NotRunning)) => error(
            StatusCode::CONFLICT,
            format!(
                "sink {sink:?} is not running: the pipeline stopped, or the sink was detached for pinning the \
                 source's log and needs a resync (`sluice checkpoints reset --sink`)"
            ),
        )
        .into_response(),
        Ok(Err(ReattachError::NotDetached)) => {
            error(StatusCode::CONFLICT, format!("sink {sink:?} is not detached; it is writing already")).into_response()
        }
        Ok(Err(ReattachError::ProbeFailed(why))) => {
            error(StatusCode::UNPROCESSABLE_ENTITY, format!("still detached: {why}")).into_response()
        }
        Err(_) => error(StatusCode::GATEWAY_TIMEOUT, "the probe did not finish in 300 s".to_string()).into_response(),
    }
}

/// The last hour of each sink's throughput and lag, and the retained WAL.
async fn history(State(api): Shared, Path(name): Path<String>) -> Response {
    if api.status(&name).is_none() {
        return no_pipeline(&api, &name).into_response();
    }
    Json(api.history.of(&name)).into_response()
}

/// The stored checkpoints, next to what each sink holds durably.
async fn checkpoints(State(api): Shared, Path(name): Path<String>) -> Response {
    let Some(p) = api.status(&name) else { return no_pipeline(&api, &name).into_response() };
    let keys: Vec<CheckpointKey> = p.sinks.iter().map(|s| CheckpointKey::new(&p.source_id, &s.id)).collect();
    let store = api.store.clone();
    let load_keys = keys.clone();
    let stored = match tokio::task::spawn_blocking(move || store.load(&load_keys)).await {
        Ok(Ok(stored)) => stored,
        Ok(Err(e)) => return store_error(e).into_response(),
        Err(e) => return store_error(e).into_response(),
    };
    let view = p.view();
    let rows: Vec<Value> = keys
        .iter()
        .zip(stored)
        .zip(&view.sinks)
        .map(|((key, position), sink)| {
            json!({
                "sink": sink.id,
                "key": key.to_string(),
                "stored": position.map(|p| p.to_string()),
                "durable": sink.durable,
                "guarantee": sink.guarantee,
            })
        })
        .collect();
    Json(json!({ "pipeline": name, "replay_from": view.replay_from, "checkpoints": rows })).into_response()
}

async fn snapshot_progress(State(api): Shared, Path(name): Path<String>) -> Response {
    let Some(p) = api.status(&name) else { return no_pipeline(&api, &name).into_response() };
    let ended: Vec<Value> = sluice_core::snapshot::progress::ended()
        .into_iter()
        .filter(|e| *e.source == *p.source_id)
        .map(|e| {
            json!({
                "seq": e.seq, "table": &*e.table, "rows": e.rows, "refused": e.refused,
                "at": sluice_core::time::format_utc_micros(e.at_us),
            })
        })
        .collect();
    Json(json!({ "pipeline": name, "running": p.view().snapshots, "ended": ended })).into_response()
}

#[derive(Deserialize)]
struct SnapshotRequest {
    table: String,
}

/// Starts an incremental snapshot of one table, as `sluice snapshot` does.
async fn snapshot_start(
    State(api): Shared,
    Path(name): Path<String>,
    body: Result<Json<SnapshotRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Some(config) = api.catalog.config().pipelines.into_iter().find(|p| p.name == name) else {
        return no_pipeline(&api, &name).into_response();
    };
    let Ok(Json(request)) = body else {
        return error(StatusCode::BAD_REQUEST, r#"send a JSON body like {"table": "public.orders"}"#.to_string())
            .into_response();
    };
    let requested = match &config.source {
        SourceConfig::Postgres(source) => sluice_postgres::incremental::request(source, &request.table).await,
        SourceConfig::Mysql(source) => sluice_mysql::incremental::request(source, &request.table).await,
        SourceConfig::Generator(_) => {
            return error(StatusCode::CONFLICT, "the generator source has no tables to re-read".to_string())
                .into_response();
        }
    };
    match requested {
        Ok(at) => {
            (StatusCode::ACCEPTED, Json(json!({ "pipeline": name, "table": request.table, "signal": at.to_string() })))
                .into_response()
        }
        Err(e) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()).into_response(),
    }
}

#[derive(Deserialize)]
struct DlqFilter {
    pipeline: Option<String>,
    sink: Option<String>,
}

fn summary(letter: &DeadLetter) -> Value {
    json!({
        "key": letter.key, "source": letter.source_id, "sink": letter.sink_id, "position": letter.position,
        "error": letter.error, "recorded_at": sluice_core::time::format_utc_micros(letter.recorded_at_us),
    })
}

async fn letters(api: &Api) -> Result<Vec<DeadLetter>, (StatusCode, Json<Value>)> {
    let store = api.store.clone();
    match tokio::task::spawn_blocking(move || store.letters()).await {
        Ok(Ok(letters)) => Ok(letters),
        Ok(Err(e)) => Err(store_error(e)),
        Err(e) => Err(store_error(e)),
    }
}

async fn find_letter(api: &Api, key: &str) -> Result<DeadLetter, (StatusCode, Json<Value>)> {
    letters(api)
        .await?
        .into_iter()
        .find(|l| l.key == key)
        .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("no dead letter has key {key:?}; GET /dlq lists the keys")))
}

async fn dlq_list(State(api): Shared, Query(filter): Query<DlqFilter>) -> Response {
    let source = match &filter.pipeline {
        Some(name) => match api.status(name) {
            Some(p) => Some(p.source_id.clone()),
            None => return no_pipeline(&api, name).into_response(),
        },
        None => None,
    };
    let letters = match letters(&api).await {
        Ok(letters) => letters,
        Err(e) => return e.into_response(),
    };
    let shown: Vec<Value> = letters
        .iter()
        .filter(|l| source.as_ref().is_none_or(|s| *s == l.source_id))
        .filter(|l| filter.sink.as_ref().is_none_or(|s| *s == l.sink_id))
        .map(summary)
        .collect();
    Json(json!({ "count": shown.len(), "letters": shown })).into_response()
}

async fn dlq_show(State(api): Shared, Path(key): Path<String>) -> Response {
    match find_letter(&api, &key).await {
        Ok(letter) => {
            let mut shown = summary(&letter);
            shown["event"] = serde_json::from_str(&letter.event).unwrap_or(Value::String(letter.event.clone()));
            Json(shown).into_response()
        }
        Err(e) => e.into_response(),
    }
}

async fn dlq_purge(State(api): Shared, Path(key): Path<String>) -> Response {
    if let Err(e) = find_letter(&api, &key).await {
        return e.into_response();
    }
    let store = api.store.clone();
    let keys = vec![key.clone()];
    match tokio::task::spawn_blocking(move || store.purge(&keys)).await {
        Ok(Ok(purged)) => Json(json!({ "key": key, "purged": purged })).into_response(),
        Ok(Err(e)) => store_error(e).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}

/// Sends a dead letter to its sink again through the running sink; once
/// the sink takes it, it leaves the queue.
async fn dlq_retry(State(api): Shared, Path(key): Path<String>) -> Response {
    let letter = match find_letter(&api, &key).await {
        Ok(letter) => letter,
        Err(e) => return e.into_response(),
    };
    let Some(p) = api
        .catalog
        .handles()
        .into_iter()
        .find(|p| p.status.source_id == letter.source_id && p.status.sink(&letter.sink_id).is_some())
    else {
        return error(
            StatusCode::CONFLICT,
            format!(
                "no pipeline of this process has sink {:?} on source {:?}; retry with `sluice dlq retry` and the config the letter was written under",
                letter.sink_id, letter.source_id
            ),
        )
        .into_response();
    };
    let sink = letter.sink_id.clone();
    match tokio::time::timeout(Duration::from_secs(300), p.control.redeliver(letter)).await {
        Ok(Ok(())) => {}
        Ok(Err(RedeliverError::Refused(why))) => {
            return error(StatusCode::UNPROCESSABLE_ENTITY, format!("kept in the queue: {why}")).into_response();
        }
        Ok(Err(RedeliverError::NotRunning | RedeliverError::NoSuchSink)) => {
            return error(
                StatusCode::CONFLICT,
                format!("sink {sink:?} is not running (stopped or detached); kept in the queue"),
            )
            .into_response();
        }
        Err(_) => {
            return error(StatusCode::GATEWAY_TIMEOUT, "the sink did not answer; kept in the queue".to_string())
                .into_response();
        }
    }
    let store = api.store.clone();
    let keys = vec![key.clone()];
    match tokio::task::spawn_blocking(move || store.purge(&keys)).await {
        Ok(Ok(_)) => Json(json!({ "key": key, "delivered": true })).into_response(),
        Ok(Err(e)) => store_error(e).into_response(),
        Err(e) => store_error(e).into_response(),
    }
}

/// Reads the config again: pipelines added start, removed ones stop, and
/// changed ones start again with their new settings.
async fn reload(State(api): Shared) -> Response {
    match api.reloader.reload().await {
        Ok(reloaded) => Json(json!(reloaded)).into_response(),
        Err(crate::reload::ReloadError::NotInFleet) => {
            error(StatusCode::CONFLICT, crate::reload::ReloadError::NotInFleet.to_string()).into_response()
        }
        Err(e) => error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()).into_response(),
    }
}

/// Every pipeline's view once a second, for the dashboard.
async fn events(State(api): Shared) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let ticks = tokio::time::interval(Duration::from_secs(1));
    let stream = futures_util::stream::unfold((ticks, api), |(mut ticks, api)| async move {
        ticks.tick().await;
        let views: Vec<_> = api.statuses().iter().map(|p| p.view()).collect();
        let data =
            json!({ "at": sluice_core::time::format_utc_micros(sluice_core::time::now_us()), "pipelines": views });
        Some((Ok(SseEvent::default().data(data.to_string())), (ticks, api)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
