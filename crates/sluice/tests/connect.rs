//! `sluice validate --connect` against the real servers: a config whose
//! sources and sinks are all reachable passes, with a warning for a table
//! without a key; one with a wrong password, a missing publication, an
//! unreachable broker, a webhook that refuses the credentials and database
//! sinks whose users lack privileges fail on
//! exactly those checks, names the fix, and shows no secret.

mod common;

use common::lake::s3_target;
use common::pg::{fresh_database, pg_env, sql};
use common::receiver::{Receiver, Reply};
use common::*;

fn postgres(id: &str, db: &str, password: &str, extra: &str) -> String {
    format!(
        "    source: {{ type: postgres, config: {{ id: {id}, host: 127.0.0.1, port: {}, database: {db}, user: {}, password: \"{password}\", ssl_mode: disable, tables: [public.*]{extra} }} }}\n",
        pg_env("SLUICE_TEST_PG_PORT"),
        pg_env("SLUICE_TEST_PG_USER"),
    )
}

/// The lines of the check `name` (with its fix) under the heading that
/// contains `heading`.
fn check(output: &str, heading: &str, name: &str) -> String {
    let section =
        output.split("\npipeline ").find(|s| s.contains(heading)).unwrap_or_else(|| panic!("no {heading}:\n{output}"));
    let lines: Vec<&str> = section.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.len() > 8 && l[8..].starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} under {heading}:\n{output}"));
    let more = lines[at + 1..].iter().take_while(|l| l.starts_with("        ")).count();
    lines[at..=at + more].join("\n")
}

#[test]
fn a_config_whose_servers_answer_passes_with_a_line_per_check() {
    let db = "connect_ok";
    fresh_database(db);
    sql(db, "CREATE TABLE items (id bigint PRIMARY KEY); CREATE TABLE notes (body text)");
    common::my::my_exec(
        "CREATE DATABASE IF NOT EXISTS connect_ok; CREATE TABLE IF NOT EXISTS connect_ok.items (id int PRIMARY KEY)",
    );
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: pg\n{}    sinks:\n      - {{ type: kafka, config: {{ id: k, brokers: \"{}\", topic: connect.items, exactly_once: true }} }}\n      - {{ type: redis, config: {{ id: r, url: \"{}\", stream: s }} }}\n      - {{ type: nats, config: {{ id: n, url: \"{}\", subject: \"connect.x\", stream: connect_ok, create_stream: true }} }}\n      - {{ type: s3, config: {{ id: lake, {}, prefix: connect }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{}\" }} }}\n      - {{ type: file, config: {{ id: f, path: out.jsonl }} }}\n  - name: my\n    source: {{ type: mysql, config: {{ id: my1, host: 127.0.0.1, port: {}, user: {}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [connect_ok.*] }} }}\n    sinks:\n      - {{ type: null, config: {{ id: nothing }} }}\n      - {{ type: mysql, config: {{ id: mys, host: 127.0.0.1, port: {}, user: {}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", schema: connect_ok }} }}\n      - {{ type: postgres, config: {{ id: pgs, host: 127.0.0.1, port: {}, database: {db}, user: {}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable }} }}\n",
        postgres(db, db, "${SLUICE_TEST_PG_PASSWORD}", ""),
        env("SLUICE_TEST_KAFKA_BROKERS"),
        env("SLUICE_TEST_REDIS_URL"),
        env("SLUICE_TEST_NATS_URL"),
        s3_target(),
        receiver.url("/in/${table}"),
        env("SLUICE_TEST_MY_PORT"),
        env("SLUICE_TEST_MY_USER"),
        env("SLUICE_TEST_MY_PORT"),
        env("SLUICE_TEST_MY_USER"),
        pg_env("SLUICE_TEST_PG_PORT"),
        pg_env("SLUICE_TEST_PG_USER"),
    );
    let config = write_config(dir.path(), &config);
    let output = run(&["validate", "--connect", "-c", config.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{text}{}", stderr(&output));
    for (heading, name) in [
        ("source connect_ok", "connect"),
        ("source connect_ok", "server"),
        ("source connect_ok", "replication connection"),
        ("source connect_ok", "publication"),
        ("source connect_ok", "slot"),
        ("sink k", "brokers"),
        ("sink k", "transactions"),
        ("sink r", "server"),
        ("sink n", "stream"),
        ("sink lake", "bucket"),
        ("sink hook", "receiver"),
        ("sink f", "path"),
        ("source my1", "binlog"),
        ("source my1", "replication grant"),
        ("sink mys", "connect"),
        ("sink mys", "checkpoint table"),
        ("sink mys", "target privileges"),
        ("sink pgs", "connect"),
        ("sink pgs", "checkpoint table"),
    ] {
        assert!(check(&text, heading, name).trim_start().starts_with("ok"), "{heading} {name}:\n{text}");
    }
    let keyless = check(&text, "source connect_ok", "replica identity");
    assert!(keyless.contains("WARN") && keyless.contains("public.notes") && keyless.contains("fix:"), "{keyless}");
    let methods: Vec<String> = receiver.requests().iter().map(|r| r.method.clone()).collect();
    assert_eq!(methods, ["HEAD"], "one HEAD and nothing else reached the webhook");
    assert!(!dir.path().join("out.jsonl").exists(), "validate writes nothing");
}

#[test]
fn each_failing_check_names_the_fix_and_no_secret() {
    let db = "connect_bad";
    fresh_database(db);
    sql(db, "CREATE TABLE items (id bigint PRIMARY KEY)");
    let receiver = Receiver::start();
    receiver.set_rule(|_| Reply::Status(401));
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "pipelines:\n  - name: wrong\n{}    sinks:\n      - {{ type: redis, config: {{ id: r, url: \"{}\", password: redis-pass-9191, ca_file: {}, stream: s, timeout_secs: 5 }} }}\n  - name: nopub\n{}    sinks:\n      - {{ type: kafka, config: {{ id: k, brokers: \"127.0.0.1:1\", topic: t, timeout_secs: 3 }} }}\n      - {{ type: http, config: {{ id: hook, url: \"{}\", headers: {{ Authorization: \"Bearer hook-token-5150\" }} }} }}\n  - name: weak\n{}    sinks:\n      - {{ type: mysql, config: {{ id: mweak, host: 127.0.0.1, port: {}, user: sluice_noslave, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", schema: connect_bad }} }}\n      - {{ type: postgres, config: {{ id: pweak, host: 127.0.0.1, port: {}, database: {db}, user: sluice_norepl, password: \"${{SLUICE_TEST_PG_PASSWORD}}\", ssl_mode: disable }} }}\n",
        postgres("wrongpass", db, "pg-pass-4242", ""),
        env("SLUICE_TEST_REDIS_TLS_URL"),
        env("SLUICE_TEST_TLS_CA"),
        postgres(
            "nopub",
            db,
            "${SLUICE_TEST_PG_PASSWORD}",
            ", create_publication: false, slot: connect_bad_slot, create_slot: false"
        ),
        receiver.url("/in"),
        postgres("weak", db, "${SLUICE_TEST_PG_PASSWORD}", ""),
        env("SLUICE_TEST_MY_PORT"),
        pg_env("SLUICE_TEST_PG_PORT"),
    );
    let config = write_config(dir.path(), &config);
    let output = run(&["validate", "--connect", "-c", config.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(stderr(&output).contains("check(s) failed"), "{}", stderr(&output));
    let connect = check(&text, "wrong: source", "connect");
    assert!(connect.contains("FAIL") && connect.contains("check user and password"), "{connect}");
    let publication = check(&text, "nopub: source", "publication");
    assert!(publication.contains("FAIL") && publication.contains("create_publication: true"), "{publication}");
    let slot = check(&text, "nopub: source", "slot");
    assert!(slot.contains("FAIL") && slot.contains("connect_bad_slot"), "{slot}");
    let brokers = check(&text, "sink k", "brokers");
    assert!(brokers.contains("FAIL") && brokers.contains("fix: check brokers"), "{brokers}");
    let hook = check(&text, "sink hook", "receiver");
    assert!(hook.contains("FAIL") && hook.contains("401"), "{hook}");
    let redis = check(&text, "sink r", "server");
    assert!(redis.contains("FAIL") && redis.contains("check the url's user and the password"), "{redis}");
    let target = check(&text, "sink mweak", "target privileges");
    assert!(
        target.contains("FAIL")
            && target.contains(
                "GRANT INSERT, UPDATE, DELETE, CREATE, ALTER ON `connect_bad`.* TO 'sluice_noslave'@'127.0.0.1'"
            ),
        "{target}"
    );
    let checkpoints = check(&text, "sink mweak", "checkpoint table");
    assert!(checkpoints.contains("FAIL") && checkpoints.contains("GRANT"), "{checkpoints}");
    let checkpoints = check(&text, "sink pweak", "checkpoint table");
    assert!(checkpoints.contains("FAIL") && checkpoints.contains("sluice_norepl may not"), "{checkpoints}");
    for secret in ["pg-pass-4242", "redis-pass-9191", "hook-token-5150"] {
        assert!(!text.contains(secret) && !stderr(&output).contains(secret), "{secret} shown:\n{text}");
    }
}
