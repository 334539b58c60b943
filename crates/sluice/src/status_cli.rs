//! `sluice status`: the API's per-sink table in a terminal.

use anyhow::anyhow;
use serde_json::Value;

use crate::cli::{SinksAction, SinksArgs, StatusArgs};
use crate::validate::table;
use crate::{Failure, api};

pub fn status(args: StatusArgs) -> Result<(), Failure> {
    let path = match &args.pipeline {
        Some(name) => format!("/pipelines/{name}"),
        None => "/pipelines".to_string(),
    };
    let url = format!("http://{}{path}", args.api_addr);
    let Some(every) = args.watch else {
        print!("{}", shown(&block_on(call(reqwest::Method::GET, &url))?, args.json));
        return Ok(());
    };
    let every = std::time::Duration::from_secs(every.max(1));
    loop {
        let text = shown(&block_on(call(reqwest::Method::GET, &url))?, args.json);
        // Clear the screen and draw from its top, as `watch` does.
        print!("\x1b[2J\x1b[H{text}");
        std::thread::sleep(every);
    }
}

/// The answer as JSON, or as a table per pipeline.
fn shown(body: &Value, json: bool) -> String {
    if json {
        return format!("{}\n", serde_json::to_string_pretty(body).unwrap_or_default());
    }
    match body.get("pipelines").and_then(Value::as_array) {
        Some(list) => list.iter().map(render).collect(),
        None => render(body),
    }
}

/// `sluice sinks reattach`: the API's reattach route, whose answer waits
/// for the sink's probe.
pub fn sinks(args: SinksArgs) -> Result<(), Failure> {
    let SinksAction::Reattach { api_addr, pipeline, sink } = args.action;
    let url = format!("http://{api_addr}/pipelines/{pipeline}/sinks/{sink}/reattach");
    let body = block_on(call(reqwest::Method::POST, &url))?;
    println!("{}: {}", sink, text(&body["message"]));
    Ok(())
}

pub fn block_on(call: impl Future<Output = Result<Value, Failure>>) -> Result<Value, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::pipeline(anyhow!("cannot start the async runtime: {e}")))?;
    runtime.block_on(call)
}

pub async fn call(method: reqwest::Method, url: &str) -> Result<Value, Failure> {
    // A reattach waits for the sink's probe, which one deadline bounds.
    let timeout = if method == reqwest::Method::GET { 10 } else { 310 };
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(timeout))
        .build()
        .map_err(|e| Failure::pipeline(anyhow!("cannot build an HTTP client: {e}")))?;
    let changes = method != reqwest::Method::GET;
    let mut request = client.request(method, url);
    if changes {
        // The API takes state changes only as JSON, which web pages cannot send.
        request = request.header(reqwest::header::CONTENT_TYPE, "application/json");
    }
    if let Ok(token) = std::env::var(api::TOKEN_ENV)
        && !token.is_empty()
    {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| {
        Failure::pipeline(anyhow!(
            "cannot reach the API at {url}: {e}; hint: is `sluice run` running, and with this --api-addr?"
        ))
    })?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| Failure::pipeline(anyhow!("reading the answer of {url}: {e}")))?;
    let body: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Failure::pipeline(anyhow!("the API at {url} sent something that is not JSON: {e}")))?;
    if !status.is_success() {
        let message = body["error"].as_str().unwrap_or("no error text");
        return Err(Failure::bad_input(anyhow!("{url}: {status}: {message}")));
    }
    Ok(body)
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n
            .as_f64()
            .map_or_else(|| n.to_string(), |f| if f.fract() == 0.0 { format!("{f:.0}") } else { format!("{f:.1}") }),
        other => other.to_string(),
    }
}

/// One pipeline: a header line, its problems, then a row per sink.
fn render(p: &Value) -> String {
    let source = &p["source"];
    let stalled = if source["stalled"] == true { " STALLED" } else { "" };
    let mut out = format!(
        "pipeline {} ({}): source {} {} read {} head {} behind {} bytes, {}s{stalled}\n",
        text(&p["name"]),
        text(&p["state"]),
        text(&source["kind"]),
        text(&source["id"]),
        text(&source["position"]),
        text(&source["head"]),
        text(&source["behind_bytes"]),
        text(&source["lag_seconds"]),
    );
    if let Some(sink) = p["held_back_by"].as_str() {
        out.push_str(&format!("  held back by sink {sink}: its buffer is full\n"));
    }
    for snapshot in p["snapshots"].as_array().into_iter().flatten() {
        out.push_str(&format!("  {}\n", snapshot_line(snapshot)));
    }
    if let Some(problems) = p["problems"].as_array().filter(|list| !list.is_empty()) {
        for problem in problems {
            out.push_str(&format!("  not ready: {}\n", text(problem)));
        }
    }
    let mut rows = vec![
        [
            "SINK",
            "GUARANTEE",
            "STATE",
            "CHECKPOINT",
            "DURABLE",
            "LAG EVENTS",
            "LAG S",
            "BUFFER",
            "ERRORS",
            "LAST ERROR",
        ]
        .map(String::from),
    ];
    for sink in p["sinks"].as_array().into_iter().flatten() {
        let mut last_error = text(&sink["last_error"]["message"]);
        if let Some(reason) = sink["detached"]["reason"].as_str() {
            last_error = format!("detached: {reason}");
        }
        rows.push([
            text(&sink["id"]),
            text(&sink["guarantee"]),
            text(&sink["state"]),
            text(&sink["checkpoint"]),
            text(&sink["durable"]),
            text(&sink["lag_events"]),
            text(&sink["lag_seconds"]),
            buffer(&sink["buffer"]),
            text(&sink["errors"]),
            last_error.chars().take(80).collect(),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

/// A sink's buffer: batches, and the bytes in memory and on disk.
fn buffer(b: &Value) -> String {
    let mib = |v: &Value| v.as_u64().unwrap_or(0) as f64 / (1024.0 * 1024.0);
    let overflowed = if b["overflowed"].as_bool() == Some(true) { " overflowed" } else { "" };
    format!("{} ({:.1}+{:.1} MiB){overflowed}", text(&b["batches"]), mib(&b["memory_bytes"]), mib(&b["disk_bytes"]))
}

/// `incremental snapshot public.orders (1/1) 12000/50000 rows 24% 4000/s ETA 10s`
pub fn snapshot_line(s: &Value) -> String {
    let kind = if s["incremental"] == true { "incremental snapshot" } else { "snapshot" };
    let done = s["tables_done"].as_u64().unwrap_or(0) + 1;
    let mut line = format!("{kind} {} ({done}/{}) {}", text(&s["table"]), text(&s["tables"]), text(&s["rows"]));
    match s["estimated_rows"].as_u64().filter(|e| *e > 0) {
        Some(estimate) => {
            let percent = (s["rows"].as_u64().unwrap_or(0) as f64 * 100.0 / estimate as f64).min(100.0);
            line.push_str(&format!("/{estimate} rows {percent:.0}%"));
        }
        None => line.push_str(" rows"),
    }
    line.push_str(&format!(" {}/s", text(&s["rows_per_sec"])));
    if let Some(eta) = s["eta_secs"].as_u64() {
        line.push_str(&format!(" ETA {eta}s"));
    }
    line
}
