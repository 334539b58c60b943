//! `sluice run --fleet` with its leases in a real etcd (TLS with client
//! certificates) and its checkpoints in the PostgreSQL store: three
//! instances share three pipelines; a killed owner's pipeline moves once
//! its etcd lease expires; a stalled owner's too, and the store's fence,
//! raised to the new key's revision, refuses the stalled one's
//! checkpoints when it wakes. Every target table ends equal to its source.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::fleet::*;
use common::pg::*;
use common::*;

const STORE: &str = "store_e2e_etcd";
const TARGET: &str = "e2e_etcd_target";
const PIPELINES: [&str; 3] = ["ea", "eb", "ec"];

fn fleet_yaml(prefix: &str) -> String {
    let (ca, cert, key) =
        (env("SLUICE_TEST_TLS_CA"), env("SLUICE_TEST_TLS_CLIENT_CERT"), env("SLUICE_TEST_TLS_CLIENT_KEY"));
    format!(
        "fleet:\n  lease_ttl_secs: 4\n  renew_every_secs: 1\n  leases:\n    type: etcd\n    config: {{ endpoints: [\"{}\"], prefix: \"{prefix}\", ca_file: {ca}, cert_file: {cert}, key_file: {key} }}\n",
        env("SLUICE_TEST_ETCD_URL")
    )
}

fn config(prefix: &str) -> String {
    let mut text = format!("{}{}pipelines:\n", store_yaml(STORE), fleet_yaml(prefix));
    for name in PIPELINES {
        text.push_str(&pipeline_yaml(name, "e2e_etcd", TARGET));
    }
    text
}

/// Each pipeline's owner and epoch as an instance's API shows them.
fn owners(addr: &str) -> BTreeMap<String, (String, i64)> {
    let answer = common::api::get(addr, "/pipelines", None).json();
    answer["pipelines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["owner"].is_object())
        .map(|p| {
            let owner = &p["owner"];
            let name = p["name"].as_str().unwrap().to_string();
            (name, (owner["instance"].as_str().unwrap().to_string(), owner["epoch"].as_i64().unwrap()))
        })
        .collect()
}

fn signal(child: &Running, name: &str) {
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args([name, &pid]).status().unwrap().success());
}

#[test]
fn an_etcd_fleet_takes_over_a_killed_or_stalled_owners_pipelines_and_fences_the_stalled_one() {
    sql("postgres", &format!("DROP SCHEMA IF EXISTS {STORE} CASCADE"));
    fresh_database(TARGET);
    for name in PIPELINES {
        fresh_source(&format!("e2e_etcd_{name}"));
    }
    let prefix = format!("/{}/", unique("sluice_etcd"));
    let root = tempfile::tempdir().unwrap();
    let mut instances: BTreeMap<String, (Running, std::path::PathBuf, String)> = BTreeMap::new();
    for id in ["e1", "e2", "e3"] {
        let dir = root.path().join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let config = write_config(&dir, &config(&prefix));
        let args = ["run", "-c", config.to_str().unwrap(), "--fleet", "--instance-id", id, "--api-addr", "127.0.0.1:0"];
        let child = spawn(&args, &dir);
        let addr = common::api::api_addr(&dir);
        instances.insert(id.to_string(), (child, dir, addr));
    }
    let watcher = |instances: &BTreeMap<String, (Running, std::path::PathBuf, String)>, not: &[&str]| {
        instances.iter().find(|(id, _)| !not.contains(&id.as_str())).map(|(_, (_, _, addr))| addr.clone()).unwrap()
    };
    let addr = watcher(&instances, &[]);
    wait_until(Duration::from_secs(90), "one pipeline on each instance", || {
        let owners = owners(&addr);
        owners.len() == 3 && owners.values().map(|(o, _)| o).collect::<BTreeSet<_>>().len() == 3
    });
    let checked =
        run(&["validate", "--connect", "-c", instances["e1"].1.join("pipeline.yaml").to_str().unwrap()], root.path());
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success() && stdout.contains("fleet: etcd leases"), "{stdout}{}", stderr(&checked));
    // The store's fence is each key's revision.
    let fences = leases_any(STORE);
    for (pipeline, (_, epoch)) in owners(&addr) {
        assert_eq!(fences.get(&pipeline), Some(&epoch.to_string()), "{pipeline}'s fence");
    }

    // SIGKILL the owner of `ea`: its keys expire with its etcd lease.
    let (victim, _) = owners(&addr)["ea"].clone();
    let (mut child, _, _) = instances.remove(&victim).unwrap();
    let killed = Instant::now();
    child.kill9();
    sql("e2e_etcd_ea", "INSERT INTO items VALUES (-1, 0)");
    wait_until(Duration::from_secs(60), "ea's row after the kill in the target", || {
        rows(TARGET, "SELECT id::text FROM ea.items WHERE id = -1").len() == 1
    });
    eprintln!("ea: from the kill of {victim} to its first event delivered elsewhere: {:?}", killed.elapsed());

    // SIGSTOP the owner of `eb` past its lease.
    let addr = watcher(&instances, &[]);
    let (stalled, held) = owners(&addr)["eb"].clone();
    let addr = watcher(&instances, &[stalled.as_str()]);
    signal(&instances[&stalled].0, "-STOP");
    wait_until(Duration::from_secs(60), "eb owned by another instance", || {
        owners(&addr).get("eb").is_some_and(|(owner, _)| *owner != stalled)
    });
    let (_, epoch) = owners(&addr)["eb"].clone();
    assert!(epoch > held, "eb's new epoch {epoch} is not above {held}");
    // The stalled owner's replication connection holds the slot until it
    // wakes (or the server's wal_sender_timeout ends it), so the new
    // owner delivers after that.
    signal(&instances[&stalled].0, "-CONT");
    let stalled_dir = instances[&stalled].1.clone();
    wait_until(Duration::from_secs(60), "the stalled instance giving eb up", || {
        let log = log_of(&stalled_dir);
        log.contains("lost the pipeline's lease") || log.contains("gave the pipeline up")
    });
    sql("e2e_etcd_eb", "INSERT INTO items VALUES (-1, 0)");
    wait_until(Duration::from_secs(60), "eb's row from its new owner", || {
        rows(TARGET, "SELECT id::text FROM eb.items WHERE id = -1").len() == 1
    });
    assert_eq!(leases_any(STORE).get("eb"), Some(&epoch.to_string()), "eb's fence after the takeover");

    for name in PIPELINES {
        let source = rows(&format!("e2e_etcd_{name}"), "SELECT id::text, v::text FROM items");
        wait_until(Duration::from_secs(60), &format!("{name}'s target equal to its source"), || {
            rows(TARGET, &format!("SELECT id::text, v::text FROM {name}.items")) == source
        });
    }
    for (_, (child, dir, _)) in instances {
        assert!(child.terminate().success(), "an instance did not stop cleanly:\n{}", log_of(&dir));
    }
    for name in PIPELINES {
        drop_slots(&format!("e2e_etcd_{name}"));
    }
}

/// The epoch of every lease row of the store, live or not: with etcd the
/// rows are only fences.
fn leases_any(store: &str) -> BTreeMap<String, String> {
    rows("postgres", &format!("SELECT pipeline, epoch::text FROM {store}.leases"))
        .into_iter()
        .map(|(pipeline, mut rest)| (pipeline, rest.remove(0).unwrap_or_default()))
        .collect()
}

#[test]
fn an_unreachable_etcd_and_a_fleet_section_without_fleet_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = format!(
        "{}fleet:\n  leases:\n    type: etcd\n    config: {{ endpoints: [\"http://127.0.0.1:{port}\"], timeout_secs: 1 }}\npipelines:\n{}",
        store_yaml("store_e2e_etcd_refused"),
        pipeline_yaml("never", "e2e_etcd", TARGET)
    );
    let config = write_config(dir.path(), &text);
    let output = run(&["run", "-c", config.to_str().unwrap(), "--fleet", "--api-addr", "off"], dir.path());
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains(&format!("http://127.0.0.1:{port}")), "{}", stderr(&output));
    assert!(stderr(&output).contains("fleet.leases"), "{}", stderr(&output));

    let output = run(&["run", "-c", config.to_str().unwrap(), "--api-addr", "off"], dir.path());
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--fleet"), "{}", stderr(&output));

    let output = run(&["validate", "--connect", "-c", config.to_str().unwrap()], dir.path());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    let etcd = stdout.split("fleet: etcd leases").nth(1).unwrap_or_else(|| panic!("no etcd check: {stdout}"));
    let etcd = etcd.split("\npipeline ").next().unwrap();
    assert!(etcd.contains("FAIL") && etcd.contains(&format!("127.0.0.1:{port}")), "{stdout}");
}
