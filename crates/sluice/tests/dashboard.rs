//! The dashboard in a real headless Chromium, driven over WebDriver by
//! chromedriver (Debian's `chromium` and `chromium-driver`, installed by
//! scripts/services.sh): the page loads during a run and follows it live;
//! checkpoints advance; a stalled sink's lag grows while the MIN line (the
//! replay point) stays at its checkpoint behind the healthy sink; and the
//! line moves on once the sink recovers; the sink table counts what the
//! hook's own filter dropped. A second run walks through the
//! states an operator acts on (held back, dead letters, paused, degraded)
//! and presses the page's buttons; each state leaves a screenshot under
//! target/tmp/dashboard for a person, while the checks read elements.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::api::{api_addr, call};
use common::receiver::{Receiver, Reply};
use common::*;
use serde_json::{Value, json};

const TOKEN: &str = "dash-token";

/// A chromedriver on a port of its own, stopped when dropped.
struct Driver {
    _chromedriver: Stopped,
    addr: String,
    session: String,
}

/// Kills the process when dropped, so a test that fails while the
/// browser session is set up leaves no chromedriver behind.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Driver {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Stopped(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("chromedriver runs (scripts/services.sh installs chromium-driver)"),
        );
        let addr = format!("127.0.0.1:{port}");
        wait_until(Duration::from_secs(30), "chromedriver to listen", || std::net::TcpStream::connect(&addr).is_ok());
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1200"]
            }
        }}});
        let answer = call(&addr, "POST", "/session", None, Some(&capabilities.to_string()));
        assert_eq!(answer.status, 200, "a browser session: {}", answer.body);
        let session = answer.json()["value"]["sessionId"].as_str().unwrap().to_string();
        Self { _chromedriver: child, addr, session }
    }

    fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let body = (!body.is_null()).then(|| body.to_string());
        let answer = call(&self.addr, method, &format!("/session/{}{path}", self.session), None, body.as_deref());
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.body);
        answer.json()["value"].clone()
    }

    fn open(&self, url: &str) {
        self.command("POST", "/url", json!({ "url": url }));
    }

    /// Runs `script` in the page and returns its result.
    fn run(&self, script: &str) -> Value {
        self.command("POST", "/execute/sync", json!({ "script": script, "args": [] }))
    }

    /// Clicks the first element `selector` finds, as a user would. The
    /// page redraws itself as the status changes, and an element found
    /// just before a redraw is stale by the click: then it is found again.
    fn click(&self, selector: &str) {
        for _ in 0..20 {
            let found = self.command("POST", "/element", json!({ "using": "css selector", "value": selector }));
            let id = found.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).unwrap().to_string();
            let path = format!("/session/{}/element/{id}/click", self.session);
            let answer = call(&self.addr, "POST", &path, None, Some("{}"));
            if answer.status == 200 {
                return;
            }
            assert!(answer.body.contains("stale element reference"), "POST {path}: {}", answer.body);
        }
        panic!("{selector} went stale at every one of 20 clicks");
    }

    /// Keeps a picture of the page for a person to look at; the tests
    /// judge the page by its elements and their text, never by pixels.
    fn screenshot(&self, name: &str) {
        let png = self.command("GET", "/screenshot", Value::Null);
        let png = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, png.as_str().unwrap()).unwrap();
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The session ends the browser; dropping `_chromedriver` then ends chromedriver.
        let _ = call(&self.addr, "DELETE", &format!("/session/{}", self.session), None, None);
    }
}

/// What the page shows: the head, the MIN line and each sink's marks,
/// read from the drawing itself.
const READ_PAGE: &str = r#"
const p = document.querySelector('section[data-pipeline="dash"]');
if (!p) return null;
const svg = p.querySelector('svg.log');
const sinks = {};
for (const g of p.querySelectorAll('g.sink-mark')) {
  sinks[g.dataset.sink] = {
    checkpoint: Number(g.dataset.checkpointEvents), durable: Number(g.dataset.durableEvents),
    lag: Number(g.dataset.lagEvents),
    x: Number(g.querySelector('circle').getAttribute('cx')),
  };
}
const lagCell = p.querySelector('tr.sink-row[data-sink="hook"] td.lag-events');
const dropped = Object.fromEntries([...p.querySelectorAll('tr.sink-row')].map(r => [r.dataset.sink, Number(r.querySelector('td.transforms').dataset.dropped)]));
return {
  dropped,
  head: Number(svg.dataset.headEvents), min: Number(svg.dataset.minEvents),
  min_x: Number(svg.querySelector('line.min-line').getAttribute('x1')),
  sinks, hook_lag_text: lagCell ? lagCell.textContent : null,
  live: document.getElementById('conn').textContent.startsWith('live'),
  drawn_at: document.getElementById('conn').textContent,
};
"#;

#[test]
fn the_dashboard_follows_a_run_and_keeps_the_min_line_behind_a_stalled_sink() {
    let (receiver, stalled) = Receiver::switchable(false);
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: dash\n    source: {{ type: generator, config: {{ id: gen1, rows_per_tx: 10, events_per_sec: 500 }} }}\n    sinks:\n      - {{ type: file, config: {{ id: local, path: out.jsonl }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{}\", required: false, max_attempts: 1, transforms: [{{ type: filter, ops: [d] }}] }} }}\n    batch: {{ max_events: 100, max_ms: 20, max_inflight: 64 }}\n    sink_batch_deadline_secs: 300\n",
        receiver.url("/in")
    );
    let config = write_config(dir.path(), &config);
    let _sluice = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());

    let driver = Driver::start();
    driver.open(&format!("http://{addr}/?access_token={TOKEN}"));
    let mut page = Value::Null;
    let mut read = |what: &str, check: &dyn Fn(&Value) -> bool| {
        wait_until(Duration::from_secs(60), what, || {
            page = driver.run(READ_PAGE);
            !page.is_null() && check(&page)
        });
        page.clone()
    };

    let first = read("the page to draw both sinks", &|p| {
        p["live"] == true
            && p["sinks"]["local"]["checkpoint"].as_u64() > Some(0)
            && p["sinks"]["hook"]["checkpoint"].as_u64() > Some(0)
            && p["dropped"]["hook"].as_u64() > Some(0)
    });
    // Only the hook's own filter drops the generator's deletes.
    assert_eq!(first["dropped"]["local"], 0, "{first}");
    let (local_before, hook_before) =
        (first["sinks"]["local"]["checkpoint"].clone(), first["sinks"]["hook"]["checkpoint"].clone());
    read("both checkpoints to advance on the page", &|p| {
        p["sinks"]["local"]["checkpoint"].as_u64() > local_before.as_u64()
            && p["sinks"]["hook"]["checkpoint"].as_u64() > hook_before.as_u64()
    });

    stalled.store(true, Ordering::SeqCst);
    // Batches cut before the stall may still land, and the checkpoint may
    // trail the durable mark until the required sink passes it: wait until
    // the hook's checkpoint reached its durable mark and holds still.
    let still = read("the stalled sink's checkpoint to hold still", &|p| {
        // The page redraws once a second: compare two different drawings.
        let now = p["sinks"]["hook"]["checkpoint"].clone();
        std::thread::sleep(Duration::from_millis(2500));
        let later = driver.run(READ_PAGE);
        later["drawn_at"] != p["drawn_at"]
            && later["sinks"]["hook"]["checkpoint"] == now
            && now == p["sinks"]["hook"]["durable"]
            && p["sinks"]["hook"]["lag"].as_u64() > Some(0)
    });
    let held = still["sinks"]["hook"]["checkpoint"].clone();
    let lag_then = still["sinks"]["hook"]["lag"].as_u64().unwrap();
    let stalled_page = read("the stalled sink's lag to grow while the other sink goes on", &|p| {
        p["sinks"]["hook"]["lag"].as_u64() > Some(lag_then)
            && p["sinks"]["local"]["checkpoint"].as_u64() > held.as_u64()
    });
    assert_eq!(stalled_page["sinks"]["hook"]["checkpoint"], held, "the stalled sink's checkpoint does not move");
    assert_eq!(stalled_page["min"], held, "the MIN line sits at the stalled sink's checkpoint: {stalled_page}");
    let min_x = stalled_page["min_x"].as_f64().unwrap();
    assert!(
        min_x < stalled_page["sinks"]["local"]["x"].as_f64().unwrap(),
        "the MIN line is drawn behind the healthy sink: {stalled_page}"
    );
    assert!(
        stalled_page["hook_lag_text"].as_str().is_some_and(|t| t != "0"),
        "the table shows the lag: {stalled_page}"
    );

    stalled.store(false, Ordering::SeqCst);
    read("the MIN line to move on once the sink recovers", &|p| p["min"].as_u64() > held.as_u64());
}

/// What the page shows of every pipeline: the badge, the held-back line,
/// the log's head, each sink's row, mark and charts, the snapshots, the
/// retained WAL, the dead letters and the buttons.
const READ_STATES: &str = r#"
const text = (root, sel) => { const e = root.querySelector(sel); return e ? e.textContent : null; };
const pipelines = {};
for (const p of document.querySelectorAll('section.pipeline')) {
  const svg = p.querySelector('svg.log');
  const sinks = {};
  for (const r of p.querySelectorAll('tr.sink-row')) {
    const id = r.dataset.sink, mark = p.querySelector(`g.sink-mark[data-sink="${id}"]`);
    sinks[id] = {
      state: r.dataset.state, state_text: text(r, '.sink-state'), state_class: r.querySelector('.sink-state').className,
      x: Number(mark.querySelector('circle').getAttribute('cx')), durable: Number(mark.dataset.durableEvents),
      lag_seconds: text(r, '.lag-seconds'), lag_bytes: text(r, '.lag-bytes'),
      charts: Object.fromEntries([...r.querySelectorAll('svg.chart')].map(c => [c.dataset.series, Number(c.dataset.points)])),
      reattach: !!r.querySelector('button.reattach'),
    };
  }
  pipelines[p.dataset.pipeline] = {
    health: text(p, '.badge'), badge_class: p.querySelector('.badge').className,
    held_back: text(p, '.held-back'), head: Number(svg.dataset.headEvents), head_x: Number(svg.dataset.headX),
    retained_wal: text(p, '.retained-wal'),
    snapshots: [...p.querySelectorAll('.snapshot')].map(s => ({
      table: s.dataset.table, rows: Number(s.dataset.rows), text: s.textContent,
      max: Number(s.querySelector('progress').getAttribute('max')),
    })),
    dlq_count: text(p, '.dlq-count'), letters: [...p.querySelectorAll('li.letter')].map(l => l.dataset.key),
    pause: !!p.querySelector('button.pause'), resume: !!p.querySelector('button.resume'), sinks,
  };
}
return { pipelines, notice: document.getElementById('notice').textContent,
         live: document.getElementById('conn').textContent.startsWith('live') };
"#;

#[test]
fn the_dashboard_shows_each_state_an_operator_acts_on_and_its_buttons_act() {
    use common::pg::{fresh_database, pg_env, sql};
    let db = "dash_snap";
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE items (id bigint PRIMARY KEY, note text); INSERT INTO items SELECT g, 'n' || g FROM generate_series(1, 100000) g; ANALYZE items",
    );
    // The hook refuses two events (dead letters) and can be taken down;
    // the gate, required, is down from the start, so the snapshot behind it stops.
    let hook = Receiver::start();
    let (gate, gate_down) = Receiver::switchable(true);
    let hook_down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (down, refusing) = (hook_down.clone(), refuse.clone());
    let poison = ["gen:5:3", "gen:6:3"].map(|p| format!("\"position\":\"{p}\""));
    hook.set_rule(move |request| {
        let body = String::from_utf8_lossy(&request.body);
        if down.load(Ordering::SeqCst) {
            Reply::Status(503)
        } else if refusing.load(Ordering::SeqCst) && poison.iter().any(|p| body.contains(p)) {
            Reply::Status(422)
        } else {
            Reply::Status(200)
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: ops\n    source: {{ type: generator, config: {{ id: gen1, rows_per_tx: 10, events_per_sec: 300 }} }}\n    sinks:\n      - {{ type: file, config: {{ id: local, path: out.jsonl }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{hook}\", required: false, mode: single, max_attempts: 1 }} }}\n    batch: {{ max_events: 100, max_ms: 20 }}\n    sink_batch_deadline_secs: 3\n    reattach_probe_secs: 3600\n  - name: snap\n    source: {{ type: postgres, config: {{ id: {db}, host: 127.0.0.1, port: {port}, database: {db}, user: {user}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable, status_interval_secs: 1, tables: [public.items], snapshot: {{ mode: initial, chunk_size: 1000 }} }} }}\n    sinks:\n      - {{ type: http, config: {{ id: gate, url: \"{gate}\", max_attempts: 1 }} }}\n    batch: {{ max_events: 100, max_inflight: 4 }}\n",
        hook = hook.url("/hook"),
        gate = gate.url("/gate"),
        port = pg_env("SLUICE_TEST_PG_PORT"),
        user = pg_env("SLUICE_TEST_PG_USER"),
    );
    let config = write_config(dir.path(), &config);
    let _sluice = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &[("SLUICE_API_TOKEN", TOKEN)]);
    let addr = api_addr(dir.path());
    let driver = Driver::start();
    let url = format!("http://{addr}/?access_token={TOKEN}");
    driver.open(&url);
    let read = |what: &str, check: &dyn Fn(&Value) -> bool| {
        let mut page = Value::Null;
        wait_until(Duration::from_secs(90), what, || {
            page = driver.run(READ_STATES);
            page["live"] == true && check(&page)
        });
        page
    };

    // Held back: the snapshot stops behind the required gate; the badge
    // says stalled and names the sink; the bar shows how far it got.
    let held = read("the snap pipeline held back by its gate", &|p| {
        let snap = &p["pipelines"]["snap"];
        snap["health"] == "stalled" && snap["snapshots"].as_array().is_some_and(|s| !s.is_empty())
    });
    let snap = &held["pipelines"]["snap"];
    assert!(snap["badge_class"].as_str().unwrap().contains("stalled"), "{snap}");
    assert!(snap["held_back"].as_str().unwrap().contains("held back by sink gate"), "{snap}");
    let bar = &snap["snapshots"][0];
    assert_eq!(bar["table"], "public.items", "{snap}");
    assert!(bar["max"].as_f64() >= Some(90_000.0), "the bar spans the server's estimate: {bar}");
    assert!(bar["rows"].as_f64() < bar["max"].as_f64(), "a held-back snapshot is not done: {bar}");
    assert!(bar["text"].as_str().unwrap().contains("snapshot public.items (1/1)"), "{bar}");
    driver.screenshot("held-back");
    gate_down.store(false, Ordering::SeqCst);

    // Dead letters: listed with a retry button, without degrading the
    // pipeline; retried once the hook takes them, they leave the list.
    let lettered = read("the dead letters listed, the pipeline running", &|p| {
        p["pipelines"]["ops"]["dlq_count"] == "2" && p["pipelines"]["ops"]["health"] == "running"
    });
    assert_eq!(
        lettered["pipelines"]["ops"]["letters"],
        json!(["gen1::sink::hook::gen:5:3", "gen1::sink::hook::gen:6:3"])
    );
    driver.screenshot("dead-letters");
    refuse.store(false, Ordering::SeqCst);
    driver.click(r#"li.letter[data-key="gen1::sink::hook::gen:5:3"] button.retry"#);
    read("the retried letter to leave the list", &|p| p["pipelines"]["ops"]["dlq_count"] == "1");
    assert_eq!(hook.delivered_positions().iter().filter(|p| *p == "gen:5:3").count(), 1, "delivered once");

    // The snapshot ends once the gate is up; the pipeline runs again.
    // The slot's retained WAL shows once the source streams.
    read("the snap pipeline running with its snapshot done", &|p| {
        let snap = &p["pipelines"]["snap"];
        snap["health"] == "running"
            && snap["snapshots"] == json!([])
            && snap["held_back"].is_null()
            && snap["retained_wal"].as_str().is_some_and(|t| t.starts_with("retained WAL "))
    });

    // Server-side history: a page opened now draws the time before it.
    wait_until(Duration::from_secs(60), "three samples in the server", || {
        call(&addr, "GET", "/pipelines/ops/history", Some(TOKEN), None).json()["points"].as_array().map_or(0, Vec::len)
            >= 3
    });
    driver.open(&url);
    let charted = read("the charts drawn from the server's samples", &|p| {
        p["pipelines"]["ops"]["sinks"]["local"]["charts"]["events_per_sec"].as_u64() >= Some(3)
    });
    for series in ["lag_seconds", "lag_bytes"] {
        assert!(
            charted["pipelines"]["ops"]["sinks"]["hook"]["charts"][series].as_u64() >= Some(3),
            "{series}: {charted}"
        );
    }

    // Paused: the badge says so, every sink catches up and is drawn at the head.
    driver.click(r#"section[data-pipeline="ops"] button.pause"#);
    let paused = read("paused, with every sink at the head", &|p| {
        let ops = &p["pipelines"]["ops"];
        ops["health"] == "paused"
            && ops["resume"] == true
            && ["local", "hook"].iter().all(|s| ops["sinks"][s]["durable"] == ops["head"])
    });
    let ops = &paused["pipelines"]["ops"];
    for sink in ["local", "hook"] {
        assert_eq!(ops["sinks"][sink]["x"], ops["head_x"], "{sink}, caught up, is drawn at the head: {ops}");
    }
    assert!(ops["badge_class"].as_str().unwrap().contains("paused"));
    driver.screenshot("paused");
    driver.click(r#"section[data-pipeline="ops"] button.resume"#);
    read("running again", &|p| p["pipelines"]["ops"]["health"] == "running" && p["pipelines"]["ops"]["pause"] == true);

    // Degraded: the optional hook fails, then is detached, with a button
    // to reattach it; the badge says degraded while the file goes on.
    hook_down.store(true, Ordering::SeqCst);
    let detached = read("the hook detached", &|p| {
        let ops = &p["pipelines"]["ops"];
        ops["health"] == "degraded"
            && ops["sinks"]["hook"]["state"] == "detached"
            && ops["sinks"]["hook"]["reattach"] == true
    });
    let hook_row = &detached["pipelines"]["ops"]["sinks"]["hook"];
    assert_eq!(hook_row["state_text"], "detached");
    assert!(hook_row["state_class"].as_str().unwrap().contains("detached"), "{hook_row}");
    assert_eq!(detached["pipelines"]["ops"]["sinks"]["local"]["state"], "running");
    driver.screenshot("degraded");
    hook_down.store(false, Ordering::SeqCst);
    driver.click(r#"section[data-pipeline="ops"] button.reattach[data-sink="hook"]"#);
    let back = read("the hook live again after the button", &|p| {
        let ops = &p["pipelines"]["ops"];
        ops["health"] == "running" && ops["sinks"]["hook"]["state"] == "running"
    });
    assert!(back["notice"].as_str().unwrap().starts_with("reattach hook: "), "{back}");
    driver.screenshot("running");
}
