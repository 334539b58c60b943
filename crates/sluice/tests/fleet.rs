//! `sluice run --fleet` against real PostgreSQL: three instances share
//! three pipelines (PostgreSQL into the postgres sink) through leases in
//! the PostgreSQL store. The pipelines spread one per instance; the owner
//! of one is killed with SIGKILL and another instance takes it over; the
//! owner of another is stopped (SIGSTOP) past its lease, another takes it
//! over, and when it wakes it gives the pipeline up. Afterwards every
//! target table equals its source table, row for row.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::fleet::*;
use common::pg::*;
use common::*;

const STORE: &str = "store_e2e_fleet";
const TARGET: &str = "e2e_fleet_target";
const PIPELINES: [&str; 3] = ["fa", "fb", "fc"];

fn config() -> String {
    let mut text = format!("{}pipelines:\n", store_yaml(STORE));
    for name in PIPELINES {
        text.push_str(&pipeline_yaml(name, "e2e_fleet", TARGET));
    }
    text
}

/// Each pipeline's owner, if a live instance holds its lease.
fn owners() -> BTreeMap<String, String> {
    leases(STORE, "owner")
}

#[test]
fn three_instances_share_the_pipelines_and_take_over_a_killed_or_stalled_owners() {
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {STORE} CASCADE"));
    fresh_database(TARGET);
    for name in PIPELINES {
        fresh_source(&format!("e2e_fleet_{name}"));
    }
    let root = tempfile::tempdir().unwrap();
    let mut instances: BTreeMap<String, (Running, std::path::PathBuf)> = BTreeMap::new();
    for id in ["i1", "i2", "i3"] {
        let dir = root.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let config = write_config(&dir, &config());
        let child =
            spawn(&["run", "-c", config.to_str().unwrap(), "--fleet", "--instance-id", id, "--api-addr", "off"], &dir);
        instances.insert(id.to_string(), (child, dir));
    }
    // The fleet spreads: one pipeline per instance.
    wait_until(Duration::from_secs(90), "one pipeline on each instance", || {
        let owners = owners();
        owners.len() == 3 && owners.values().collect::<std::collections::BTreeSet<_>>().len() == 3
    });

    // Rows keep arriving in every source meanwhile.
    let writer = Writer::start(PIPELINES.iter().map(|name| format!("e2e_fleet_{name}")).collect(), |next| {
        format!("INSERT INTO items VALUES ({next}, 1); UPDATE items SET v = v + 1 WHERE id = {}", next % 100 + 1)
    });

    // SIGKILL the owner of `fa`: another instance takes it over.
    let victim = owners()["fa"].clone();
    let (mut child, _) = instances.remove(&victim).unwrap();
    let killed = Instant::now();
    child.kill9();
    sql("e2e_fleet_fa", "INSERT INTO items VALUES (-1, 0)");
    wait_until(Duration::from_secs(60), "fa's row after the kill in the target", || {
        rows(TARGET, "SELECT id::text FROM fa.items WHERE id = -1").len() == 1
    });
    let new_owner = owners()["fa"].clone();
    assert_ne!(new_owner, victim);
    eprintln!("fa: from the kill of {victim} to {new_owner} delivering its first event: {:?}", killed.elapsed());

    // SIGSTOP the owner of `fb` past its lease: another takes it over, and
    // the stalled one gives it up when it wakes.
    let stalled = owners()["fb"].clone();
    let pid = instances[&stalled].0.id().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    wait_until(Duration::from_secs(60), "fb owned by another instance", || {
        owners().get("fb").is_some_and(|owner| *owner != stalled)
    });
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    let stalled_dir = instances[&stalled].1.clone();
    wait_until(Duration::from_secs(60), "the stalled instance giving fb up", || {
        log_of(&stalled_dir).contains("lost the pipeline's lease")
    });

    writer.stop();
    for name in PIPELINES {
        let source = rows(&format!("e2e_fleet_{name}"), "SELECT id::text, v::text FROM items");
        let equal = wait_for(Duration::from_secs(120), || {
            rows(TARGET, &format!("SELECT id::text, v::text FROM {name}.items")) == source
        });
        if !equal {
            let logs: Vec<String> =
                instances.iter().map(|(id, (_, dir))| format!("--- {id}:\n{}", log_of(dir))).collect();
            panic!("{name}'s target never equalled its source; the instances' logs:\n{}", logs.join("\n"));
        }
    }
    for (_, (child, dir)) in instances {
        let status = child.terminate();
        assert!(status.success(), "an instance did not stop cleanly:\n{}", log_of(&dir));
    }
    for name in PIPELINES {
        drop_slots(&format!("e2e_fleet_{name}"));
    }
}

#[test]
fn a_fleet_without_the_postgresql_store_or_with_a_file_sink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let generator = "pipelines:\n  - name: g\n    source: { type: generator, config: { id: g } }\n    sinks: [ { type: null, config: { id: n } } ]\n";
    let config = write_config(dir.path(), generator);
    let output = run(&["run", "-c", config.to_str().unwrap(), "--fleet", "--api-addr", "off"], dir.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("store: { type: postgres"), "{}", stderr(&output));

    let with_file = config_with_file();
    let config = write_config(dir.path(), &with_file);
    let output = run(&["run", "-c", config.to_str().unwrap(), "--fleet", "--api-addr", "off"], dir.path());
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("pipelines[0].sinks[0]") && stderr(&output).contains("this instance's disk"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_fleet_refuses_a_kafka_sink_that_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let with_read_back = config().replacen(
        "      - type: postgres\n        config: { id: target,",
        "      - type: kafka\n        config: { id: k, brokers: \"127.0.0.1:1\", topic: t, exactly_once: read_back }\n      - type: postgres\n        config: { id: target,",
        1,
    );
    let config = write_config(dir.path(), &with_read_back);
    let output = run(&["run", "-c", config.to_str().unwrap(), "--fleet", "--api-addr", "off"], dir.path());
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(
        text.contains("pipelines[0].sinks[0].config.exactly_once") && text.contains("exactly_once: true"),
        "{text}"
    );
}

fn config_with_file() -> String {
    config().replacen(
        "      - type: postgres\n        config: { id: target,",
        "      - type: file\n        config: { id: file, path: out.jsonl }\n      - type: postgres\n        config: { id: target,",
        1,
    )
}

const RELOAD_STORE: &str = "store_e2e_reload";
const RELOAD_TARGET: &str = "e2e_reload_target";

/// Writes pipeline `name`'s file into every instance's config folder, or
/// removes it.
fn set_pipeline_file(folders: &[std::path::PathBuf], name: &str, present: bool) {
    for folder in folders {
        let file = folder.join(format!("{name}.yaml"));
        if present {
            let text = format!("pipelines:\n{}", pipeline_yaml(name, "e2e_reload", RELOAD_TARGET));
            std::fs::write(file, text).unwrap();
        } else {
            std::fs::remove_file(file).unwrap();
        }
    }
}

#[test]
fn a_reload_starts_an_added_pipeline_file_in_the_fleet_and_stops_a_removed_one_leaving_the_others_running() {
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {RELOAD_STORE} CASCADE"));
    fresh_database(RELOAD_TARGET);
    for name in ["ra", "rb", "rc"] {
        fresh_source(&format!("e2e_reload_{name}"));
    }
    let root = tempfile::tempdir().unwrap();
    let (mut children, mut folders, mut addrs) = (Vec::new(), Vec::new(), Vec::new());
    for id in ["r1", "r2"] {
        let dir = root.path().join(id);
        let folder = dir.join("conf");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("store.yaml"), store_yaml(RELOAD_STORE)).unwrap();
        folders.push(folder.clone());
        set_pipeline_file(&folders[folders.len() - 1..], "ra", true);
        set_pipeline_file(&folders[folders.len() - 1..], "rb", true);
        let args = ["run", "-c", folder.to_str().unwrap(), "--fleet", "--instance-id", id, "--api-addr", "127.0.0.1:0"];
        children.push(spawn(&args, &dir));
        addrs.push(common::api::api_addr(&dir));
    }
    wait_until(Duration::from_secs(90), "ra and rb running, one per instance", || {
        let owners = leases(RELOAD_STORE, "owner");
        owners.len() == 2 && owners.values().collect::<std::collections::BTreeSet<_>>().len() == 2
    });
    let ra = leases(RELOAD_STORE, "owner || ':' || epoch")["ra"].clone();

    // A config that does not load is refused whole, naming the file.
    std::fs::write(folders[1].join("broken.yaml"), "pipelines: [ {").unwrap();
    let refused = common::api::call(&addrs[1], "POST", "/reload", None, None);
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.body.contains("broken.yaml"), "{}", refused.body);
    common::api::assert_documented(&openapi(), "/reload", "POST", &refused);
    std::fs::remove_file(folders[1].join("broken.yaml")).unwrap();

    // Added: one instance hears SIGHUP, the other POST /reload.
    set_pipeline_file(&folders, "rc", true);
    hangup(&children[0]);
    let reloaded = common::api::call(&addrs[1], "POST", "/reload", None, None);
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    common::api::assert_documented(&openapi(), "/reload", "POST", &reloaded);
    let reloaded = reloaded.json();
    assert_eq!(reloaded["added"], serde_json::json!(["rc"]));
    assert_eq!(reloaded["unchanged"], serde_json::json!(["ra", "rb"]));
    let source = rows("e2e_reload_rc", "SELECT id::text, v::text FROM items");
    wait_until(Duration::from_secs(60), "rc's rows in its target", || {
        rows(RELOAD_TARGET, "SELECT id::text, v::text FROM rc.items") == source
    });

    // Removed: its owner stops it and gives its lease back.
    set_pipeline_file(&folders, "rb", false);
    let reloaded = common::api::call(&addrs[0], "POST", "/reload", None, None);
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    assert_eq!(reloaded.json()["removed"], serde_json::json!(["rb"]));
    hangup(&children[1]);
    wait_until(Duration::from_secs(30), "rb's lease given back and rb gone from both APIs", || {
        let listed = addrs.iter().any(|addr| {
            let answer = common::api::get(addr, "/pipelines", None).json();
            answer["pipelines"].as_array().unwrap().iter().any(|p| p["name"] == "rb")
        });
        !leases(RELOAD_STORE, "owner").contains_key("rb") && !listed
    });

    // ra ran on through both reloads under the lease it started with.
    assert_eq!(leases(RELOAD_STORE, "owner || ':' || epoch")["ra"], ra);
    sql("e2e_reload_ra", "INSERT INTO items VALUES (-1, 0)");
    wait_until(Duration::from_secs(30), "ra's new row in its target", || {
        rows(RELOAD_TARGET, "SELECT id::text FROM ra.items WHERE id = -1").len() == 1
    });
    for child in children {
        assert!(child.terminate().success());
    }
    for name in ["ra", "rb", "rc"] {
        drop_slots(&format!("e2e_reload_{name}"));
    }
}

#[test]
fn a_lone_run_refuses_a_reload_and_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let generator = "pipelines:\n  - name: g\n    source: { type: generator, config: { id: g, events_per_sec: 100 } }\n    sinks: [ { type: null, config: { id: n } } ]\n";
    let config = write_config(dir.path(), generator);
    let child = spawn(&["run", "-c", config.to_str().unwrap(), "--api-addr", "127.0.0.1:0"], dir.path());
    let addr = common::api::api_addr(dir.path());
    let refused = common::api::call(&addr, "POST", "/reload", None, None);
    assert_eq!(refused.status, 409, "{}", refused.body);
    common::api::assert_documented(&openapi(), "/reload", "POST", &refused);
    assert!(refused.body.contains("restart"), "{}", refused.body);
    hangup(&child);
    wait_until(Duration::from_secs(30), "the SIGHUP refusal in the log", || {
        log_of(dir.path()).contains("config not reloaded")
    });
    assert_eq!(common::api::get(&addr, "/health", None).status, 200);
    assert!(child.terminate().success());
}
