//! The HTTP API of `sluice run`: every route, with and without the bearer
//! token, held against openapi.json; pause and resume; the dead letter
//! routes against a real webhook receiver; `/ready` following a required
//! sink's outage; `sluice status`; and what keeps other web pages from
//! driving an API without a token.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::api::{api_addr, assert_documented, call, get, raw};
use common::receiver::{Receiver, Reply};
use common::*;
use serde_json::Value;

const TOKEN: &str = "s3cret-token";

fn openapi() -> Value {
    serde_json::from_str(include_str!("../src/api/openapi.json")).expect("openapi.json is JSON")
}

fn generator_pipeline(name: &str, rate: u64, sinks: &str, extra: &str) -> String {
    format!(
        "pipelines:\n  - name: {name}\n    source: {{ type: generator, config: {{ id: gen1, rows_per_tx: 10, events_per_sec: {rate} }} }}\n    sinks:\n{sinks}    batch: {{ max_events: 200, max_ms: 20 }}\n{extra}"
    )
}

fn head_events(addr: &str, pipeline: &str) -> u64 {
    get(addr, &format!("/pipelines/{pipeline}"), Some(TOKEN)).json()["head_events"].as_u64().unwrap()
}

#[test]
fn every_route_answers_as_its_openapi_document_says_and_needs_the_token() {
    let doc = openapi();
    let receiver = Receiver::start();
    let poison = ["gen:5:3", "gen:6:3"].map(|p| format!("\"position\":\"{p}\""));
    let refuse = Arc::new(AtomicBool::new(true));
    let refusing = refuse.clone();
    receiver.set_rule(move |request| {
        let body = String::from_utf8_lossy(&request.body);
        if refusing.load(Ordering::SeqCst) && poison.iter().any(|p| body.contains(p)) {
            Reply::Status(422)
        } else {
            Reply::Status(200)
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let sinks = format!(
        "      - {{ type: file, config: {{ id: local, path: out.jsonl }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{}\", required: false, mode: single }} }}\n",
        receiver.url("/hook")
    );
    let config = write_config(dir.path(), &generator_pipeline("api", 2000, &sinks, ""));
    let _sluice = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());

    // The token: required everywhere but /health.
    let health = get(&addr, "/health", None);
    assert_eq!(health.status, 200);
    assert_documented(&doc, "/health", "GET", &health);
    for path in ["/pipelines", "/ready", "/metrics", "/dlq", "/", "/openapi.json", "/events"] {
        let refused = get(&addr, path, None);
        assert_eq!(refused.status, 401, "{path} without the token");
        assert_eq!(get(&addr, path, Some("wrong")).status, 401, "{path} with a wrong token");
    }
    assert_documented(&doc, "/pipelines", "GET", &get(&addr, "/pipelines", Some("wrong")));
    assert_eq!(
        get(&addr, &format!("/pipelines?access_token={TOKEN}"), None).status,
        200,
        "the token as a query parameter"
    );

    wait_until(Duration::from_secs(60), "both poison events in the dead letter queue", || {
        get(&addr, "/dlq", Some(TOKEN)).json()["count"] == 2
    });
    wait_until(Duration::from_secs(30), "the pipeline to be ready", || get(&addr, "/ready", Some(TOKEN)).status == 200);
    assert_documented(&doc, "/ready", "GET", &get(&addr, "/ready", Some(TOKEN)));

    let list = get(&addr, "/pipelines", Some(TOKEN));
    assert_documented(&doc, "/pipelines", "GET", &list);
    let one = get(&addr, "/pipelines/api", Some(TOKEN));
    assert_documented(&doc, "/pipelines/{name}", "GET", &one);
    let view = one.json();
    assert_eq!(view["state"], "running");
    assert_eq!(view["sinks"][0]["guarantee"], "exactly-once");
    assert_eq!(view["sinks"][1]["exactly_once"], false);
    assert_eq!(view["sinks"][1]["dead_lettered"], 2);
    let missing = get(&addr, "/pipelines/nope", Some(TOKEN));
    assert_eq!(missing.status, 404);
    assert_documented(&doc, "/pipelines/{name}", "GET", &missing);

    let checkpoints = get(&addr, "/pipelines/api/checkpoints", Some(TOKEN));
    assert_documented(&doc, "/pipelines/{name}/checkpoints", "GET", &checkpoints);
    assert_eq!(checkpoints.json()["checkpoints"][0]["key"], "gen1::sink::local");
    assert_documented(&doc, "/pipelines/{name}/snapshot", "GET", &get(&addr, "/pipelines/api/snapshot", Some(TOKEN)));
    let mut history = get(&addr, "/pipelines/api/history", Some(TOKEN));
    wait_until(Duration::from_secs(30), "a sample in the history", || {
        history = get(&addr, "/pipelines/api/history", Some(TOKEN));
        history.json()["points"].as_array().is_some_and(|p| !p.is_empty())
    });
    assert_documented(&doc, "/pipelines/{name}/history", "GET", &history);
    assert_eq!(history.json()["points"][0]["sinks"][0]["id"], "local");
    assert_documented(&doc, "/pipelines/{name}/history", "GET", &get(&addr, "/pipelines/nope/history", Some(TOKEN)));
    let no_body = call(&addr, "POST", "/pipelines/api/snapshot", Some(TOKEN), Some("{}"));
    assert_eq!(no_body.status, 400);
    assert_documented(&doc, "/pipelines/{name}/snapshot", "POST", &no_body);
    let no_tables = call(&addr, "POST", "/pipelines/api/snapshot", Some(TOKEN), Some(r#"{"table":"x"}"#));
    assert_eq!(no_tables.status, 409, "{}", no_tables.body);
    assert_documented(&doc, "/pipelines/{name}/snapshot", "POST", &no_tables);

    // The dead letter queue: list, filter, show, retry, purge.
    let letters = get(&addr, "/dlq?pipeline=api&sink=hook", Some(TOKEN));
    assert_documented(&doc, "/dlq", "GET", &letters);
    let keys: Vec<String> =
        letters.json()["letters"].as_array().unwrap().iter().map(|l| l["key"].as_str().unwrap().to_string()).collect();
    assert_eq!(keys, ["gen1::sink::hook::gen:5:3", "gen1::sink::hook::gen:6:3"]);
    assert_eq!(get(&addr, "/dlq?sink=local", Some(TOKEN)).json()["count"], 0);
    let shown = get(&addr, &format!("/dlq/{}", keys[0]), Some(TOKEN));
    assert_documented(&doc, "/dlq/{key}", "GET", &shown);
    assert_eq!(shown.json()["event"]["position"], "gen:5:3");
    let unknown = get(&addr, "/dlq/nothing-here", Some(TOKEN));
    assert_eq!(unknown.status, 404);
    assert_documented(&doc, "/dlq/{key}", "GET", &unknown);

    let still_refused = call(&addr, "POST", &format!("/dlq/{}/retry", keys[0]), Some(TOKEN), None);
    assert_eq!(still_refused.status, 422, "{}", still_refused.body);
    assert_documented(&doc, "/dlq/{key}/retry", "POST", &still_refused);
    refuse.store(false, Ordering::SeqCst);
    let retried = call(&addr, "POST", &format!("/dlq/{}/retry", keys[0]), Some(TOKEN), None);
    assert_eq!(retried.status, 200, "{}", retried.body);
    assert_documented(&doc, "/dlq/{key}/retry", "POST", &retried);
    let redelivered = receiver.delivered_positions().iter().filter(|p| *p == "gen:5:3").count();
    assert_eq!(redelivered, 1, "the retried event reached the receiver once");
    let purged = call(&addr, "DELETE", &format!("/dlq/{}", keys[1]), Some(TOKEN), None);
    assert_documented(&doc, "/dlq/{key}", "DELETE", &purged);
    assert_eq!(purged.json()["purged"], 1);
    assert_eq!(get(&addr, "/dlq", Some(TOKEN)).json()["count"], 0, "retried and purged letters leave the queue");
    assert!(!receiver.delivered_positions().contains(&"gen:6:3".to_string()), "a purged letter is not delivered");

    // Pause holds the source; resume lets it go on.
    let paused = call(&addr, "POST", "/pipelines/api/pause", Some(TOKEN), None);
    assert_documented(&doc, "/pipelines/{name}/pause", "POST", &paused);
    assert_eq!(paused.json()["changed"], true);
    assert_eq!(get(&addr, "/pipelines/api", Some(TOKEN)).json()["state"], "paused");
    let not_ready = get(&addr, "/ready", Some(TOKEN));
    assert_eq!(not_ready.status, 503);
    assert_documented(&doc, "/ready", "GET", &not_ready);
    assert!(not_ready.body.contains("paused"), "{}", not_ready.body);
    let mut before = head_events(&addr, "api");
    wait_until(Duration::from_secs(30), "the paused pipeline to stop cutting batches", || {
        std::thread::sleep(Duration::from_millis(500));
        let now = head_events(&addr, "api");
        std::mem::replace(&mut before, now) == now
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(head_events(&addr, "api"), before, "nothing is read while paused");
    let resumed = call(&addr, "POST", "/pipelines/api/resume", Some(TOKEN), None);
    assert_documented(&doc, "/pipelines/{name}/resume", "POST", &resumed);
    wait_until(Duration::from_secs(30), "the resumed pipeline to read again", || head_events(&addr, "api") > before);
    assert_eq!(call(&addr, "POST", "/pipelines/nope/pause", Some(TOKEN), None).status, 404);

    let event = common::api::first_event(&addr, "/events", Some(TOKEN));
    let pipeline_schema = serde_json::json!({ "$ref": "#/components/schemas/Pipeline" });
    let problems = common::api::mismatches(&doc, &pipeline_schema, &event["pipelines"][0], "$.pipelines[0]");
    assert!(problems.is_empty(), "an /events payload does not match the Pipeline schema: {problems:?}");
    assert!(event["at"].is_string());

    let metrics = get(&addr, "/metrics", Some(TOKEN));
    assert_documented(&doc, "/metrics", "GET", &metrics);
    assert!(metrics.body.contains("sluice_sink_events_total{pipeline=\"api\",sink=\"local\"}"), "{}", metrics.body);
    assert!(metrics.body.contains("sluice_dlq_depth{pipeline=\"api\",sink=\"hook\"} 0"), "{}", metrics.body);
    let document = get(&addr, "/openapi.json", Some(TOKEN));
    assert_documented(&doc, "/openapi.json", "GET", &document);
    assert_eq!(document.json(), doc, "the served document is the one in the repository");
    let page = get(&addr, "/", Some(TOKEN));
    assert_documented(&doc, "/", "GET", &page);
    assert!(page.body.contains("EventSource"), "the dashboard page");
    assert_eq!(get(&addr, "/no/such/route", Some(TOKEN)).status, 404);

    // `sluice status` over the same API.
    let status = sluice().args(["status", "--api-addr", &addr]).env("SLUICE_API_TOKEN", TOKEN).output().unwrap();
    let printed = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{}", stderr(&status));
    assert!(printed.contains("pipeline api (running)"), "{printed}");
    assert!(printed.lines().any(|l| l.starts_with("local") && l.contains("exactly-once")), "{printed}");
    assert!(printed.lines().any(|l| l.starts_with("hook") && l.contains("at-least-once")), "{printed}");
    let refused = sluice().args(["status", "--api-addr", &addr]).env_remove("SLUICE_API_TOKEN").output().unwrap();
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("401"), "{}", stderr(&refused));
}

#[test]
fn without_a_token_the_api_refuses_what_other_web_pages_could_send() {
    let doc = openapi();
    let dir = tempfile::tempdir().unwrap();
    let sinks = "      - { type: file, config: { id: local, path: out.jsonl } }\n";
    let config = write_config(dir.path(), &generator_pipeline("open", 200, sinks, ""));
    let _sluice = spawn_with_env(
        &["run", "-c", config.to_str().unwrap(), "--api-allowed-hosts", "sluice.test,proxy.test:443"],
        dir.path(),
        &[],
    );
    let addr = api_addr(dir.path());
    let port = addr.rsplit_once(':').unwrap().1;
    let host = |h: &str| format!("Host: {h}");
    // Running first, so "nothing refused took effect" below compares with
    // a pipeline that could have been paused.
    wait_until(Duration::from_secs(30), "the pipeline running", || {
        get(&addr, "/pipelines/open", None).json()["state"] == "running"
    });

    // DNS rebinding: a page on a name that now resolves to 127.0.0.1.
    let rebound = raw(&addr, "GET", "/pipelines", &[&host(&format!("rebound.example:{port}"))], "");
    assert_eq!(rebound.status, 421, "{}", rebound.body);
    assert!(rebound.json()["error"].as_str().unwrap().contains("--api-allowed-hosts"), "{}", rebound.body);
    assert_documented(&doc, "/pipelines", "GET", &rebound);
    assert_eq!(raw(&addr, "GET", "/health", &[&host("rebound.example")], "").status, 421);
    assert_eq!(raw(&addr, "GET", "/pipelines", &[], "").status, 421, "no Host at all");
    for allowed in [addr.clone(), format!("localhost:{port}"), "sluice.test".into(), "proxy.test:443".into()] {
        let served = raw(&addr, "GET", "/pipelines", &[&host(&allowed)], "");
        assert_eq!(served.status, 200, "Host {allowed}: {}", served.body);
    }

    // A "simple" cross-origin request: text/plain needs no preflight.
    let plain = raw(
        &addr,
        "POST",
        "/pipelines/open/pause",
        &[&host(&addr), "Content-Type: text/plain", "Origin: http://evil.example"],
        "{}",
    );
    assert_eq!(plain.status, 403, "{}", plain.body);
    assert_documented(&doc, "/pipelines/{name}/pause", "POST", &plain);
    let plain = raw(&addr, "POST", "/pipelines/open/pause", &[&host(&addr), "Content-Type: text/plain"], "{}");
    assert_eq!(plain.status, 415, "{}", plain.body);
    assert_documented(&doc, "/pipelines/{name}/pause", "POST", &plain);
    let bare = raw(&addr, "DELETE", "/dlq/some-key", &[&host(&addr)], "");
    assert_eq!(bare.status, 415, "{}", bare.body);
    assert_documented(&doc, "/dlq/{key}", "DELETE", &bare);
    let foreign = raw(
        &addr,
        "POST",
        "/pipelines/open/pause",
        &[&host(&addr), "Content-Type: application/json", "Origin: http://evil.example"],
        "",
    );
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    assert!(foreign.json()["error"].as_str().unwrap().contains("evil.example"), "{}", foreign.body);
    let null_origin = raw(
        &addr,
        "POST",
        "/pipelines/open/pause",
        &[&host(&addr), "Content-Type: application/json", "Origin: null"],
        "",
    );
    assert_eq!(null_origin.status, 403, "{}", null_origin.body);
    assert_eq!(get(&addr, "/pipelines/open", None).json()["state"], "running", "nothing refused took effect");

    // The API's own origin, as its dashboard page would send it.
    let own = raw(
        &addr,
        "POST",
        "/pipelines/open/pause",
        &[&host(&addr), "Content-Type: application/json; charset=utf-8", &format!("Origin: http://{addr}")],
        "",
    );
    assert_eq!(own.status, 200, "{}", own.body);
    assert_documented(&doc, "/pipelines/{name}/pause", "POST", &own);
    assert_eq!(get(&addr, "/pipelines/open", None).json()["state"], "paused");
    let proxied = raw(
        &addr,
        "POST",
        "/pipelines/open/resume",
        &[&host("proxy.test:443"), "Content-Type: application/json", "Origin: https://proxy.test:443"],
        "",
    );
    assert_eq!(proxied.status, 200, "{}", proxied.body);
    assert_eq!(get(&addr, "/pipelines/open", None).json()["state"], "running");

    let status = sluice().args(["status", "--api-addr", &addr]).output().unwrap();
    assert!(status.status.success(), "{}", stderr(&status));
    assert!(String::from_utf8_lossy(&status.stdout).contains("pipeline open (running)"));
}

#[test]
fn a_malformed_allowed_host_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_file(10, 1, None, "out.jsonl"));
    let output = run(&["run", "-c", config.to_str().unwrap(), "--api-allowed-hosts", "http://x.test/"], dir.path());
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--api-allowed-hosts"), "{}", stderr(&output));
    assert!(!dir.path().join("sluice-data").exists(), "no data dir was created");
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_the_query_token_is_decoded() {
    let token = "t0k+en/with=&%?";
    let encoded = "t0k%2Ben%2Fwith%3D%26%25%3F";
    let dir = tempfile::tempdir().unwrap();
    let sinks = "      - { type: file, config: { id: local, path: out.jsonl } }\n";
    let config = write_config(dir.path(), &generator_pipeline("auth", 100, sinks, ""));
    let _sluice = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", token)]);
    let addr = api_addr(dir.path());
    let host = format!("Host: {addr}");
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let answer = raw(&addr, "GET", "/pipelines", &[&host, &format!("Authorization: {scheme} {token}")], "");
        assert_eq!(answer.status, 200, "scheme {scheme}: {}", answer.body);
    }
    assert_eq!(raw(&addr, "GET", "/pipelines", &[&host, &format!("Authorization: Basic {token}")], "").status, 401);
    let query = get(&addr, &format!("/pipelines?access_token={encoded}"), None);
    assert_eq!(query.status, 200, "the percent-encoded token in the query: {}", query.body);
    assert_eq!(get(&addr, "/pipelines?access_token=t0k%2Ben", None).status, 401);
    let event = common::api::first_event(&addr, &format!("/events?access_token={encoded}"), None);
    assert!(event["pipelines"].is_array(), "the dashboard's event stream, with the token as it encodes it");
}

#[test]
fn ready_fails_while_a_required_sink_keeps_failing_and_recovers_with_it() {
    let (receiver, down) = Receiver::switchable(false);
    let dir = tempfile::tempdir().unwrap();
    let sinks = format!(
        "      - {{ type: http, config: {{ id: hook, url: \"{}\", max_attempts: 1 }} }}\n",
        receiver.url("/in")
    );
    let config =
        write_config(dir.path(), &generator_pipeline("ready", 500, &sinks, "    slo: { max_failing_secs: 2 }\n"));
    let _sluice = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());
    wait_until(Duration::from_secs(30), "ready", || get(&addr, "/ready", Some(TOKEN)).status == 200);

    down.store(true, Ordering::SeqCst);
    wait_until(Duration::from_secs(60), "/ready to fail for the failing sink", || {
        let answer = get(&addr, "/ready", Some(TOKEN));
        answer.status == 503 && answer.json()["pipelines"][0]["problems"].to_string().contains("kept failing")
    });
    let answer = get(&addr, "/ready", Some(TOKEN)).json();
    let problems = answer["pipelines"][0]["problems"].to_string();
    assert!(problems.contains("required sink hook has kept failing"), "{problems}");
    // Its buffer filled meanwhile, so it is also what holds the source back.
    assert!(problems.contains("held back by sink hook"), "{problems}");
    let view = get(&addr, "/pipelines/ready", Some(TOKEN)).json();
    assert_eq!(view["held_back_by"], "hook");
    let sink = &view["sinks"][0];
    assert_eq!(sink["state"], "retrying");
    assert!(sink["last_error"]["message"].as_str().unwrap().contains("503"), "{sink}");
    assert!(sink["retries"].as_u64().unwrap() > 0);

    down.store(false, Ordering::SeqCst);
    wait_until(Duration::from_secs(60), "/ready to recover", || get(&addr, "/ready", Some(TOKEN)).status == 200);
    assert_eq!(get(&addr, "/pipelines/ready", Some(TOKEN)).json()["sinks"][0]["state"], "running");
}

#[test]
fn a_taken_api_port_is_a_clear_error_before_anything_runs() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &generator_to_file(10, 1, None, "out.jsonl"));
    let output = run(&["run", "-c", config.to_str().unwrap(), "--api-addr", &addr], dir.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains(&format!("--api-addr {addr}: cannot listen")), "{}", stderr(&output));
    assert!(!dir.path().join("out.jsonl").exists(), "nothing ran");
    assert!(!dir.path().join("sluice-data").exists(), "the address is checked before the data dir is created");
    let off = run(&["run", "-c", config.to_str().unwrap(), "--api-addr", "off"], dir.path());
    assert!(off.status.success(), "{}", stderr(&off));
}

/// `gen:TX:SEQ` as an index along the stream (events before it, from 1).
fn generator_index(position: &str, rows_per_tx: u64) -> u64 {
    let mut parts = position.trim_start_matches("gen:").split(':').map(|p| p.parse::<u64>().unwrap());
    let (tx, seq) = (parts.next().unwrap(), parts.next().unwrap());
    (tx - 1) * rows_per_tx + seq + 1
}

#[test]
fn replay_filtering_is_counted_as_duplicates_avoided() {
    let (receiver, down) = Receiver::switchable(true);
    let dir = tempfile::tempdir().unwrap();
    let sinks = format!(
        "      - {{ type: file, config: {{ id: local, path: out.jsonl }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{}\", required: false, max_attempts: 1 }} }}\n",
        receiver.url("/in")
    );
    let extra = "    sink_batch_deadline_secs: 300\n";
    let config = write_config(dir.path(), &generator_pipeline("replay", 2000, &sinks, extra));
    let config = config.to_str().unwrap();

    // The webhook is down from the start: the file sink runs ahead of it.
    let first = spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());
    wait_until(Duration::from_secs(60), "the file sink to hold a few hundred events", || {
        get(&addr, "/pipelines/replay", Some(TOKEN)).json()["sinks"][0]["checkpoint_events"].as_u64() > Some(300)
    });
    assert!(first.terminate().success());
    let checkpoints = run(&["checkpoints", "list", "-c", config], dir.path());
    let listed = String::from_utf8_lossy(&checkpoints.stdout).to_string();
    let local_line = listed.lines().find(|l| l.contains("::sink::local")).unwrap_or_else(|| panic!("{listed}"));
    let local_at = local_line.split_whitespace().find(|w| w.starts_with("gen:")).unwrap();
    let hook_line = listed.lines().find(|l| l.contains("::sink::hook")).unwrap_or_else(|| panic!("{listed}"));
    assert!(hook_line.ends_with("none"), "the webhook never held anything: {listed}");
    let held = generator_index(local_at, 10);
    let lines_before = line_count(&dir.path().join("out.jsonl"));
    assert_eq!(lines_before as u64, held);

    // Restarted with the webhook up: the source reads again from the
    // webhook's (absent) checkpoint, and the file sink skips what it holds.
    down.store(false, Ordering::SeqCst);
    let second = spawn_with_env(&["run", "-c", config], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = common::api::api_addr_after(dir.path(), 1);
    wait_until(Duration::from_secs(60), "both sinks past the file sink's old checkpoint", || {
        let view = get(&addr, "/pipelines/replay", Some(TOKEN)).json();
        view["sinks"].as_array().unwrap().iter().all(|s| s["durable_events"].as_u64() > Some(held + 100))
    });
    let view = get(&addr, "/pipelines/replay", Some(TOKEN)).json();
    assert_eq!(view["sinks"][0]["replay_skipped"], held, "the file sink was not sent what it held: {view}");
    assert_eq!(view["sinks"][1]["replay_skipped"], 0, "{view}");
    let metrics = get(&addr, "/metrics", Some(TOKEN)).body;
    let line = format!("sluice_sink_replay_skipped_events_total{{pipeline=\"replay\",sink=\"local\"}} {held}");
    assert!(metrics.contains(&line), "{line}\n{metrics}");
    assert!(second.terminate().success());
    let events = common::replay::events(&dir.path().join("out.jsonl"));
    let positions: Vec<&str> = events.iter().map(|e| e["position"].as_str().unwrap()).collect();
    let unique: std::collections::BTreeSet<&str> = positions.iter().copied().collect();
    assert_eq!(unique.len(), positions.len(), "the file holds no event twice");
}

#[test]
fn passwords_in_sink_urls_reach_neither_the_log_nor_last_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (http_pw, nats_pw) = ("hTTp-pw-8c1e", "nAts-pw-42f7");
    let dir = tempfile::tempdir().unwrap();
    let sinks = format!(
        "      - {{ type: file, config: {{ id: local, path: out.jsonl }} }}\n      - {{ type: http, config: {{ id: hook, url: \"http://user:{http_pw}@127.0.0.1:{port}/hook\", required: false, max_attempts: 1 }} }}\n      - {{ type: nats, config: {{ id: bus, url: \"nats://user:{nats_pw}@127.0.0.1:{port}\", stream: never, required: false, timeout_secs: 2 }} }}\n"
    );
    let config = write_config(dir.path(), &generator_pipeline("secrets", 200, &sinks, ""));
    let sluice = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("RUST_LOG", "debug")]);
    let addr = api_addr(dir.path());
    let mut view = Value::Null;
    wait_until(Duration::from_secs(60), "both optional sinks to report an error", || {
        view = get(&addr, "/pipelines", None).json();
        view["pipelines"][0]["sinks"].as_array().unwrap()[1..].iter().all(|s| s["last_error"].is_object())
    });
    let shown = view.to_string();
    for secret in [http_pw, nats_pw] {
        assert!(!shown.contains(secret), "GET /pipelines shows the password {secret}: {shown}");
    }
    let hook_error = view["pipelines"][0]["sinks"][1]["last_error"]["message"].as_str().unwrap();
    assert!(hook_error.contains("user:***@127.0.0.1"), "the URL stays readable: {hook_error}");
    assert!(sluice.terminate().success());
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
    assert!(log.contains("user:***@127.0.0.1"), "the log names the URL, masked");
    for secret in [http_pw, nats_pw] {
        assert!(!log.contains(secret), "the log shows the password {secret}");
    }
}
