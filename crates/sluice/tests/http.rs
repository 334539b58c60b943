//! The HTTP webhook sink against a scripted receiver: retries on 5xx, 429
//! (honouring Retry-After) and hangs; 4xx to the dead letter queue and
//! back with `sluice dlq retry`; refused credentials stop the pipeline;
//! headers, idempotency keys and signatures; and kill -9 loses nothing.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::receiver::{Receiver, Reply, Request};
use common::*;
use sluice_config::{GeneratorConfig, SinkConfig};
use sluice_core::{Event, Position, SinkError, SliceChunks};
use sluice_generator::GeneratorSource;
use sluice_sinks::SinkContext;

fn events(count: u32) -> Vec<Event> {
    let generator = generator("gen1");
    (0..count).map(|seq| generator.event_at(1, seq)).collect()
}

fn generator(id: &str) -> GeneratorSource {
    GeneratorSource::new(GeneratorConfig {
        id: id.into(),
        tx_count: None,
        rows_per_tx: 10,
        tables: vec!["orders".into()],
        database: "generator".into(),
        events_per_sec: None,
        seed: 0,
    })
}

fn sink_config(yaml: &str) -> SinkConfig {
    let text = format!(
        "pipelines:\n  - name: h\n    source: {{ type: generator, config: {{ id: g }} }}\n    sinks:\n      - type: http\n        config: {yaml}\n"
    );
    let config = sluice_config::parse(std::path::Path::new("http.yaml"), &text, |_| None).unwrap();
    sluice_config::validate(&config).unwrap();
    config.pipelines[0].sinks[0].clone()
}

fn build(config: &SinkConfig) -> Box<dyn sluice_core::Sink> {
    sluice_sinks::build(
        config,
        &SinkContext { pipeline: "h".into(), source_id: "gen1".into(), data_dir: std::env::temp_dir() },
    )
    .unwrap()
}

/// Answers from a list in turn, then 200.
fn in_turn(replies: Vec<Reply>) -> impl FnMut(&Request) -> Reply {
    let mut replies = replies.into_iter();
    move |_| replies.next().unwrap_or(Reply::Status(200))
}

fn positions(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.position.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_5xx_and_429_honouring_retry_after_then_delivers_each_event_once() {
    let receiver = Receiver::start();
    receiver.set_rule(in_turn(vec![Reply::Status(503), Reply::WithHeaders(429, vec![("Retry-After", "1".into())])]));
    let config = sink_config(&format!("{{ id: h, url: \"{}\", initial_backoff_ms: 10 }}", receiver.url("/hook")));
    let mut sink = build(&config);
    assert_eq!(sink.open().await.unwrap(), None);
    let batch = events(3);
    let durable = sink.write(&mut SliceChunks::new(&batch).unwrap()).await.unwrap();
    assert_eq!(durable, Some(batch[2].position.clone()));

    let requests = receiver.requests();
    let statuses: Vec<u16> = requests.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 429, 200, 200, 200]);
    let waited = requests[2].at.duration_since(requests[1].at);
    assert!(waited >= Duration::from_millis(950), "Retry-After: 1 was not honoured: the retry came after {waited:?}");
    assert_eq!(receiver.delivered_positions(), positions(&batch));
    for request in receiver.delivered() {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/hook");
        assert_eq!(request.header("idempotency-key"), request.json()["id"].as_str(), "Idempotency-Key is the event id");
        assert_eq!(request.header("sluice-position"), request.json()["position"].as_str());
        assert_eq!(request.header("content-type"), Some("application/json"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_request_times_out_and_is_sent_again() {
    let receiver = Receiver::start();
    receiver.set_rule(in_turn(vec![Reply::Hang]));
    let config = sink_config(&format!(
        "{{ id: h, url: \"{}\", timeout_secs: 1, initial_backoff_ms: 10 }}",
        receiver.url("/hook")
    ));
    let mut sink = build(&config);
    sink.open().await.unwrap();
    let batch = events(1);
    sink.write(&mut SliceChunks::new(&batch).unwrap()).await.unwrap();
    let statuses: Vec<u16> = receiver.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [0, 200], "the hung request, then its retry");
    assert_eq!(receiver.delivered_positions(), positions(&batch));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_max_attempts_the_write_fails_and_a_retry_skips_what_was_acknowledged() {
    let receiver = Receiver::start();
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = answered.clone();
    // The first two events land; then the receiver fails until told otherwise.
    receiver.set_rule(
        move |_| {
            if counter.fetch_add(1, Ordering::SeqCst) < 2 { Reply::Status(200) } else { Reply::Status(500) }
        },
    );
    let config = sink_config(&format!(
        "{{ id: h, url: \"{}\", max_attempts: 3, initial_backoff_ms: 10 }}",
        receiver.url("/hook")
    ));
    let mut sink = build(&config);
    sink.open().await.unwrap();
    let batch = events(5);
    let error = sink.write(&mut SliceChunks::new(&batch).unwrap()).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(error.to_string().contains("500") && error.to_string().contains("after 3 tries"), "{error}");
    assert_eq!(receiver.requests().len(), 5, "two delivered, then three tries of the third");

    receiver.set_rule(|_| Reply::Status(200));
    let held = sink.open().await.unwrap();
    assert_eq!(held, Some(batch[1].position.clone()), "the sink remembers what the receiver acknowledged");
    let rest: Vec<Event> = batch.iter().filter(|e| Some(&e.position) > held.as_ref()).cloned().collect();
    sink.write(&mut SliceChunks::new(&rest).unwrap()).await.unwrap();
    assert_eq!(receiver.delivered_positions(), positions(&batch), "each event delivered once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_batch_mode_only_the_refused_event_is_rejected() {
    let receiver = Receiver::start();
    let batch = events(10);
    let poison = batch[6].position.to_string();
    let marker = format!("\"position\":\"{poison}\"");
    receiver.set_rule(move |request| {
        if String::from_utf8_lossy(&request.body).contains(&marker) { Reply::Status(422) } else { Reply::Status(200) }
    });
    let config = sink_config(&format!(
        "{{ id: h, url: \"{}/${{table}}\", mode: batch, batch_max_events: 100 }}",
        receiver.url("/in")
    ));
    let mut sink = build(&config);
    sink.open().await.unwrap();
    match sink.write(&mut SliceChunks::new(&batch).unwrap()).await {
        Err(SinkError::Rejected { position, detail }) => {
            assert_eq!(position.to_string(), poison);
            assert!(detail.contains("422"), "{detail}");
        }
        other => panic!("expected the poison event to be rejected, got {other:?}"),
    }
    assert_eq!(receiver.delivered_positions(), positions(&batch[..6]), "the events before it, one by one");
    assert_eq!(sink.open().await.unwrap(), Some(batch[5].position.clone()));
    let rest: Vec<Event> = batch[7..].to_vec();
    sink.write(&mut SliceChunks::new(&rest).unwrap()).await.unwrap();
    let last = receiver.delivered().pop().unwrap();
    assert_eq!(last.path, "/in/orders");
    assert_eq!(last.events().len(), 3, "the rest in one request");
    assert_eq!(last.header("idempotency-key").map(|k| k.contains("..")), Some(true));
}

fn pipeline(id: &str, tx_count: u64, rate: Option<u64>, http: &str) -> String {
    let rate = rate.map(|r| format!(", events_per_sec: {r}")).unwrap_or_default();
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: gen1, tx_count: {tx_count}, rows_per_tx: 10{rate} }} }}\n    sinks:\n      - type: http\n        config: {http}\n    batch: {{ max_events: 500, max_ms: 20 }}\n"
    )
}

/// A receiver that answers 422 to the event at `poison` while the switch
/// is on, and 200 to everything else.
fn refusing_receiver(poison: &str) -> (Receiver, Arc<std::sync::atomic::AtomicBool>) {
    let receiver = Receiver::start();
    let marker = format!("\"position\":\"{poison}\"");
    let refuse = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let refusing = refuse.clone();
    receiver.set_rule(move |request| {
        let body = String::from_utf8_lossy(&request.body);
        if refusing.load(Ordering::SeqCst) && body.contains(&marker) { Reply::Status(422) } else { Reply::Status(200) }
    });
    (receiver, refuse)
}

#[test]
fn while_the_pipeline_runs_dlq_and_checkpoints_list_ask_its_api() {
    let poison = generator("gen1").event_at(5, 3).position.to_string();
    let (receiver, refuse) = refusing_receiver(&poison);
    let dir = tempfile::tempdir().unwrap();
    let http = format!("{{ id: hook, url: \"{}\", mode: single }}", receiver.url("/hook"));
    let config = write_config(dir.path(), &pipeline("live", 1_000_000, Some(200), &http));
    let config = config.to_str().unwrap();
    let token = [("SLUICE_API_TOKEN", "live-token")];
    let _sluice = spawn_with_env(&["run", "-c", config], dir.path(), &token);
    let addr = common::api::api_addr(dir.path());
    let cli = |args: &[&str]| {
        let output = sluice()
            .args(args)
            .args(["-c", config, "--api-addr", &addr])
            .env("SLUICE_API_TOKEN", "live-token")
            .current_dir(dir.path())
            .output()
            .unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned(), stderr(&output))
    };
    let mut listing = String::new();
    wait_until(Duration::from_secs(60), "the poison event listed", || {
        listing = cli(&["dlq", "list"]).1;
        listing.contains(&poison)
    });
    assert!(listing.contains("1 dead letter(s)") && listing.contains("422"), "{listing}");
    let (_, _, said) = cli(&["dlq", "list"]);
    assert!(said.contains("asking its API at"), "says where the answer comes from: {said}");
    let key = format!("gen1::sink::hook::{poison}");
    let (code, shown, _) = cli(&["dlq", "show", &key]);
    assert_eq!(code, Some(0));
    assert!(shown.contains(&format!("\"position\": \"{poison}\"")), "{shown}");

    let (code, kept, _) = cli(&["dlq", "retry", &key]);
    assert_eq!(code, Some(1), "still refused: {kept}");
    assert!(kept.contains("0 delivered and removed, 1 kept"), "{kept}");
    refuse.store(false, Ordering::SeqCst);
    let (code, retried, said) = cli(&["dlq", "retry", "--all"]);
    assert_eq!(code, Some(0), "{retried}{said}");
    assert!(retried.contains("1 delivered and removed, 0 kept"), "{retried}");
    assert_eq!(receiver.delivered_positions().iter().filter(|p| **p == poison).count(), 1);
    assert!(cli(&["dlq", "list"]).1.contains("0 dead letter(s)"));

    let (code, checkpoints, _) = cli(&["checkpoints", "list"]);
    assert_eq!(code, Some(0));
    assert!(checkpoints.contains("gen1::sink::hook") && checkpoints.contains("gen:"), "{checkpoints}");
    // A reset needs the pipeline stopped: no API stands in for it.
    let reset = run(&["checkpoints", "reset", "-c", config, "--yes"], dir.path());
    assert_eq!(reset.status.code(), Some(2));
    assert!(stderr(&reset).contains("open in another process"), "{}", stderr(&reset));
}

#[test]
fn a_refused_event_goes_to_the_dead_letter_queue_and_dlq_retry_delivers_it() {
    let poison = generator("gen1").event_at(44, 6).position.to_string();
    let (receiver, refuse) = refusing_receiver(&poison);
    let dir = tempfile::tempdir().unwrap();
    let http = format!("{{ id: hook, url: \"{}\", mode: batch, batch_max_events: 50 }}", receiver.url("/hook"));
    let config = write_config(dir.path(), &pipeline("dlq", 100, None, &http));
    let config = config.to_str().unwrap();
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));

    let expected: BTreeSet<String> = generator_positions(100, 10).into_iter().collect();
    let delivered: BTreeSet<String> = receiver.delivered_positions().into_iter().collect();
    let missing: Vec<&String> = expected.difference(&delivered).collect();
    assert_eq!(missing, [&poison], "everything but the poison event is delivered");

    let listing = run(&["dlq", "list", "-c", config], dir.path());
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    assert!(listing.contains("1 dead letter(s)") && listing.contains("422") && listing.contains(&poison), "{listing}");

    refuse.store(false, Ordering::SeqCst);
    let retried = run(&["dlq", "retry", "--all", "-c", config], dir.path());
    assert!(retried.status.success(), "{}{}", String::from_utf8_lossy(&retried.stdout), stderr(&retried));
    assert!(String::from_utf8_lossy(&retried.stdout).contains("1 delivered and removed, 0 kept"));
    let last = receiver.delivered().pop().unwrap();
    assert_eq!(last.events().len(), 1);
    assert_eq!(last.events()[0]["position"], poison.as_str());
    let listing = run(&["dlq", "list", "-c", config], dir.path());
    assert!(String::from_utf8_lossy(&listing.stdout).contains("0 dead letter(s)"));
}

#[test]
fn refused_credentials_stop_the_pipeline_and_dead_letter_nothing() {
    let receiver = Receiver::start();
    receiver.set_rule(|_| Reply::Status(401));
    let dir = tempfile::tempdir().unwrap();
    let http = format!("{{ id: hook, url: \"{}\" }}", receiver.url("/hook"));
    let config = write_config(dir.path(), &pipeline("auth", 10, None, &http));
    let config = config.to_str().unwrap();
    let output = run(&["run", "-c", config], dir.path());
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(message.contains("401") && message.contains("credentials"), "{message}");
    let listing = run(&["dlq", "list", "-c", config], dir.path());
    assert!(String::from_utf8_lossy(&listing.stdout).contains("0 dead letter(s)"));
    let checkpoints = run(&["checkpoints", "list", "-c", config], dir.path());
    assert!(!String::from_utf8_lossy(&checkpoints.stdout).contains("gen:"), "no checkpoint moved");
}

#[test]
fn headers_come_from_the_environment_unprinted_and_bodies_are_signed() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let http = format!(
        "{{ id: hook, url: \"{}\", headers: {{ Authorization: \"Bearer ${{HOOK_TOKEN}}\" }}, signing_secret: \"${{HOOK_SECRET}}\" }}",
        receiver.url("/hook")
    );
    let config = write_config(dir.path(), &pipeline("sign", 3, None, &http));
    let config = config.to_str().unwrap();
    let with_env = |args: &[&str]| {
        sluice()
            .args(args)
            .current_dir(dir.path())
            .env("HOOK_TOKEN", "t0ken-value")
            .env("HOOK_SECRET", "shared-secret")
            .output()
            .unwrap()
    };
    let validate = with_env(&["validate", "-c", config]);
    let shown = format!("{}{}", String::from_utf8_lossy(&validate.stdout), stderr(&validate));
    assert!(validate.status.success(), "{shown}");
    assert!(shown.contains("at-least-once (dedup: Idempotency-Key = event id)"), "{shown}");
    assert!(!shown.contains("t0ken-value") && !shown.contains("shared-secret"), "a secret was printed: {shown}");

    let output = with_env(&["run", "-c", config, "--log-format", "json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!stderr(&output).contains("t0ken-value"));
    let delivered = receiver.delivered();
    assert_eq!(delivered.len(), 30);
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"shared-secret");
    for request in delivered {
        assert_eq!(request.header("authorization"), Some("Bearer t0ken-value"));
        let signature = request.header("x-sluice-signature").expect("signed");
        let hex = signature.strip_prefix("sha256=").expect("sha256=<hex>");
        let tag: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
        ring::hmac::verify(&key, &request.body, &tag).expect("the signature matches the body");
    }
}

#[test]
fn kill_9_loses_nothing_and_repeats_carry_the_same_idempotency_key() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let http = format!("{{ id: hook, url: \"{}\", mode: batch, batch_max_events: 100 }}", receiver.url("/hook"));
    let config = write_config(dir.path(), &pipeline("crash", 3000, Some(20_000), &http));
    let config = config.to_str().unwrap();
    for round in 1..=4 {
        let mut child = spawn(&["run", "-c", config], dir.path());
        wait_until(Duration::from_secs(60), "deliveries", || receiver.delivered_positions().len() >= round * 5000);
        child.kill9();
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default());

    let generator = generator("gen1");
    let expected: Vec<(String, String)> = (1..=3000)
        .flat_map(|tx| (0..10).map(move |seq| (tx, seq)))
        .map(|(tx, seq)| {
            let event = generator.event_at(tx, seq);
            (event.position.to_string(), event.id().to_string())
        })
        .collect();
    let mut held: Vec<(String, String)> = Vec::new();
    for request in receiver.delivered() {
        for event in request.events() {
            held.push((event["position"].as_str().unwrap().into(), event["id"].as_str().unwrap().into()));
        }
    }
    let unique: BTreeSet<&(String, String)> = held.iter().collect();
    let wanted: BTreeSet<&(String, String)> = expected.iter().collect();
    assert_eq!(unique, wanted, "every committed event, with its id, and nothing else");
    let order = |p: &str| -> Position { p.parse().unwrap() };
    let mut seen = BTreeSet::new();
    let first_seen: Vec<Position> =
        held.iter().filter(|(p, _)| seen.insert(p.clone())).map(|(p, _)| order(p)).collect();
    assert!(first_seen.windows(2).all(|w| w[0] < w[1]), "events first arrived out of order");
    eprintln!("{} deliveries for {} events", held.len(), expected.len());
}
