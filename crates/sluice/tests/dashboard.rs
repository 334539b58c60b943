//! The dashboard in a real headless Chromium, driven over WebDriver by
//! chromedriver (Debian's `chromium` and `chromium-driver`, installed by
//! scripts/services.sh): the page loads during a run and follows it live;
//! checkpoints advance; a stalled sink's lag grows while the MIN line (the
//! replay point) stays at its checkpoint behind the healthy sink; and the
//! line moves on once the sink recovers.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::api::{api_addr, call};
use common::receiver::Receiver;
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
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
            }
        }}});
        let answer = call(&addr, "POST", "/session", None, Some(&capabilities.to_string()));
        assert_eq!(answer.status, 200, "a browser session: {}", answer.body);
        let session = answer.json()["value"]["sessionId"].as_str().unwrap().to_string();
        Self { _chromedriver: child, addr, session }
    }

    fn command(&self, method: &str, path: &str, body: Value) -> Value {
        let answer =
            call(&self.addr, method, &format!("/session/{}{path}", self.session), None, Some(&body.to_string()));
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
return {
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
        "pipelines:\n  - name: dash\n    source: {{ type: generator, config: {{ id: gen1, rows_per_tx: 10, events_per_sec: 500 }} }}\n    sinks:\n      - {{ type: file, config: {{ id: local, path: out.jsonl }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{}\", required: false, max_attempts: 1 }} }}\n    batch: {{ max_events: 100, max_ms: 20, max_inflight: 64 }}\n    sink_batch_deadline_secs: 300\n",
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
    });
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
