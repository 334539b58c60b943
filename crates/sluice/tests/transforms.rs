//! The pipeline's transforms on real PostgreSQL and MariaDB events: what
//! the sink holds, that the slot moves past events only a filter saw, what
//! the API counts, where routed events land in a database, a Redis stream
//! and object storage, and the errors `sluice validate` gives.

mod common;

use std::time::Duration;

use common::my::{my_exec, my_rows};
use common::pg::{pg_env, sql, wait_for_slot};
use common::*;
use serde_json::Value;

/// The hex SHA-256 of `salt` + `text`, from Python's hashlib: a check
/// that owes nothing to Sluice's own hashing.
fn python_sha256(salt: &str, text: &str) -> String {
    let output = std::process::Command::new("python3")
        .args(["-c", "import hashlib, sys; print(hashlib.sha256((sys.argv[1] + sys.argv[2]).encode()).hexdigest())"])
        .args([salt, text])
        .output()
        .expect("python3 runs");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn slot_confirmed_past(db: &str, lsn: &str) -> bool {
    let query =
        format!("SELECT confirmed_flush_lsn >= '{lsn}' FROM pg_replication_slots WHERE slot_name = 'sluice_{db}'");
    pg::psql_value(db, &query) == "t"
}

fn current_lsn(db: &str) -> String {
    pg::psql_value(db, "SELECT pg_current_wal_lsn()")
}

const PG_TRANSFORMS: &str = "    transforms:\n      - { type: filter, tables: [public.audit] }\n      - { type: filter, ops: [u], where: [{ column: status, changed: false }] }\n      - { type: mask, tables: [public.users], columns: [email, e_mail], with: { sha256: { salt: \"${TEST_MASK_SALT}\" } } }\n      - { type: columns, tables: [public.users], exclude: [secret] }\n";

#[test]
fn postgres_events_are_filtered_masked_and_trimmed_and_the_slot_moves_past_dropped_ones() {
    let db = "transforms_pg";
    pg::fresh_database(db);
    sql(
        db,
        "CREATE TABLE users (id int PRIMARY KEY, email text, secret text, status text); \
         ALTER TABLE users REPLICA IDENTITY FULL; \
         CREATE TABLE audit (id serial PRIMARY KEY, note text)",
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    // Heartbeats let the slot pass WAL that other tests write to other
    // databases meanwhile, which the sampled LSN below may include; the
    // slot still cannot pass the dropped events until every sink has.
    let config = pg::pipeline(db, out.to_str().unwrap(), None)
        .replace("    sinks:\n", &format!("{PG_TRANSFORMS}    sinks:\n"))
        .replace("status_interval_secs: 1 }", "status_interval_secs: 1, heartbeat_secs: 1 }");
    let config = write_config(dir.path(), &config);
    let child = spawn_with_env(
        &["run", "-c", config.to_str().unwrap(), "--api-addr", "127.0.0.1:0"],
        dir.path(),
        &[("TEST_MASK_SALT", "pepper")],
    );
    wait_for_slot(db);
    sql(
        db,
        "INSERT INTO users VALUES (1, 'u1@example.com', 's1', 'new'), (2, 'u2@example.com', 's2', 'new'), \
         (3, 'u3@example.com', 's3', 'new'); \
         INSERT INTO audit (note) VALUES ('created three users'); \
         UPDATE users SET status = 'paid' WHERE id = 1; \
         UPDATE users SET secret = 'rotated' WHERE id = 2; \
         DELETE FROM users WHERE id = 3",
    );
    // Three inserts, the update that changed the status, the delete.
    wait_until(Duration::from_secs(60), "the kept events", || lines(&out).len() >= 5);

    // Only the filtered table is written to now: the slot still moves on.
    sql(db, "INSERT INTO audit (note) SELECT 'note ' || g FROM generate_series(1, 1000) g");
    let after_audit = current_lsn(db);
    wait_until(Duration::from_secs(60), "the slot past events only the filter saw", || {
        slot_confirmed_past(db, &after_audit)
    });

    let addr = api::api_addr(dir.path());
    let view = api::get(&addr, "/pipelines/pg", None).json();
    let steps = view["transforms"].as_array().unwrap();
    let counted: Vec<(&str, u64, u64, u64)> = steps
        .iter()
        .map(|s| {
            (
                s["type"].as_str().unwrap(),
                s["events_in"].as_u64().unwrap(),
                s["dropped"].as_u64().unwrap(),
                s["errored"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counted, [("filter", 1007, 1001, 0), ("filter", 6, 1, 0), ("mask", 5, 0, 0), ("columns", 5, 0, 0)]);
    pg::stop(child, dir.path());

    let held = lines(&out);
    let summary: Vec<(String, i64)> =
        held.iter().map(|e| (e["op"].as_str().unwrap().to_string(), e["key"]["id"].as_i64().unwrap())).collect();
    let expected: Vec<(String, i64)> =
        [("c", 1), ("c", 2), ("c", 3), ("u", 1), ("d", 3)].iter().map(|(op, id)| (op.to_string(), *id)).collect();
    assert_eq!(summary, expected);
    for event in &held {
        assert_eq!(event["table"], "public.users");
        for image in ["before", "after"] {
            let row = &event[image];
            if row.is_null() {
                continue;
            }
            let id = row["id"].as_i64().unwrap();
            assert_eq!(row["email"], python_sha256("pepper", &format!("u{id}@example.com")), "{event}");
            assert!(row.get("secret").is_none(), "the excluded column is gone: {event}");
        }
    }
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("mask: the table has no such column")).collect();
    assert!(
        warned.len() == 1 && warned[0].contains("e_mail") && warned[0].contains("public.users"),
        "one warning names the misspelt column: {warned:?}"
    );
    let text = std::fs::read_to_string(&out).unwrap() + &log;
    assert!(!text.contains("example.com"), "no clear email in the sink or the log");
    pg::drop_slots(db);
}

#[test]
fn mariadb_events_are_filtered_and_masked() {
    let db = unique("tfmy");
    my_exec(&format!(
        "CREATE DATABASE {db}; CREATE TABLE {db}.cards (id INT PRIMARY KEY, number VARCHAR(32), kind VARCHAR(16)); \
         CREATE TABLE {db}.noise (id INT PRIMARY KEY)"
    ));
    let (file, offset): (String, u64) = common::my::binlog_head();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let config = format!(
        "pipelines:\n  - name: my\n    source: {{ type: mysql, config: {{ id: {db}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{db}.*], start: {{ file: {file}, offset: {offset} }} }} }}\n    transforms:\n      - {{ type: filter, tables: [{db}.noise] }}\n      - {{ type: filter, action: keep, where: [{{ column: kind, in: [visa, amex] }}] }}\n      - {{ type: mask, columns: [number], with: {{ truncate: 4 }} }}\n    sinks:\n      - {{ type: file, config: {{ id: file, path: {out} }} }}\n",
        port = pg_env("SLUICE_TEST_MY_PORT"),
        user = pg_env("SLUICE_TEST_MY_USER"),
        out = out.display(),
    );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    my_exec(&format!(
        "INSERT INTO {db}.noise VALUES (1), (2); \
         INSERT INTO {db}.cards VALUES (1, '4111111111111111', 'visa'), (2, '5500000000000004', 'mastercard'), \
         (3, '340000000000009', 'amex'); \
         UPDATE {db}.cards SET kind = 'visa' WHERE id = 2"
    ));
    wait_until(Duration::from_secs(60), "the kept events", || lines(&out).len() >= 3);
    pg::stop(child, dir.path());
    let held = lines(&out);
    let summary: Vec<(String, i64, String)> = held
        .iter()
        .map(|e| {
            let after = &e["after"];
            (
                e["op"].as_str().unwrap().to_string(),
                after["id"].as_i64().unwrap(),
                after["number"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = [("c", 1, "4111"), ("c", 3, "3400"), ("u", 2, "5500")];
    assert_eq!(summary, expected.map(|(op, id, n)| (op.to_string(), id, n.to_string())));
    // The update's old row is masked as well.
    assert_eq!(held[2]["before"]["number"], "5500");
    let rows: Vec<(i64,)> = my_rows(&format!("SELECT count(*) FROM {db}.cards"));
    assert_eq!(rows, [(3,)], "the source keeps its rows; only what the sink gets changes");
    my_exec(&format!("DROP DATABASE {db}"));
}

#[test]
fn routed_events_land_in_one_target_table_one_stream_and_one_prefix_and_keep_their_table() {
    let (db, target) = ("transforms_route", "transforms_route_t");
    pg::fresh_database(db);
    pg::fresh_database(target);
    sql(
        db,
        "CREATE TABLE orders_2024 (id int PRIMARY KEY, amount int); \
         CREATE TABLE orders_2025 (id int PRIMARY KEY, amount int); \
         CREATE TABLE users (id int PRIMARY KEY, name text)",
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let stream = unique("route");
    let objects = dir.path().join("objects");
    let routed = r#"    transforms:
      - { type: route, regex: 'public\.orders_(\d{4})', to: "public.orders_all" }
"#;
    let config = pg::pipeline(db, out.to_str().unwrap(), None)
        .replace("    sinks:\n", &format!("{routed}    sinks:\n"))
        + &format!(
            "      - type: postgres\n        config: {}\n      - type: redis\n        config: {{ id: redis, url: \"{}\", stream: \"{stream}.${{table}}\" }}\n      - type: s3\n        config: {{ id: objects, local: {}, format: jsonl, max_file_age_secs: 1 }}\n",
            common::pgsink::sink("replica", target, ""),
            env("SLUICE_TEST_REDIS_URL"),
            objects.display(),
        );
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    sql(
        db,
        "INSERT INTO orders_2024 VALUES (1, 10), (2, 20); INSERT INTO orders_2025 VALUES (3, 30); \
         INSERT INTO users VALUES (1, 'ann'); UPDATE orders_2025 SET amount = 31 WHERE id = 3; \
         DELETE FROM orders_2024 WHERE id = 2",
    );
    wait_until(Duration::from_secs(60), "every event in the file", || lines(&out).len() >= 6);
    let union = "(SELECT * FROM orders_2024 UNION ALL SELECT * FROM orders_2025)";
    let rows = |database: &str, from: &str| common::pgsink::table_json(database, from, "id");
    wait_until(Duration::from_secs(60), "the routed rows in one target table", || {
        rows(target, "public.orders_all") == rows(db, union)
    });
    assert_eq!(rows(target, "public.users"), rows(db, "users"), "a table no route matches keeps its name");
    let missing = common::pgsink::scalar(target, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'orders_20%'");
    assert_eq!(missing, "0", "no target table under a source table's own name");
    wait_until(Duration::from_secs(60), "five routed entries in the stream", || {
        redis_positions(&format!("{stream}.public.orders_all")).len() == 5
    });
    assert!(redis_positions(&format!("{stream}.public.orders_2024")).is_empty());
    assert_eq!(redis_positions(&format!("{stream}.public.users")).len(), 1);
    wait_until(Duration::from_secs(60), "the routed events under one prefix", || {
        object_lines(&objects, "table=public.orders_all") == 5
    });
    pg::stop(child, dir.path());
    assert_eq!(object_lines(&objects, "table=public.orders_2024"), 0);
    // The events themselves still name the table they came from.
    let tables: Vec<String> = lines(&out).iter().map(|e| e["table"].as_str().unwrap().to_string()).collect();
    assert_eq!(
        tables,
        [
            "public.orders_2024",
            "public.orders_2024",
            "public.orders_2025",
            "public.users",
            "public.orders_2025",
            "public.orders_2024"
        ]
    );
    pg::drop_slots(db);
}

#[test]
fn a_sinks_own_transforms_change_what_it_gets_only_and_a_failing_step_dead_letters_one_event() {
    let db = "transforms_sink";
    pg::fresh_database(db);
    sql(db, "CREATE TABLE items (id int PRIMARY KEY, kind text); CREATE TABLE misc (id int PRIMARY KEY)");
    let dir = tempfile::tempdir().unwrap();
    let (all, mine) = (dir.path().join("all.jsonl"), dir.path().join("mine.jsonl"));
    let stream = unique("sinkroute");
    let sinks = |route_to: &str| {
        format!(
            "      - type: file\n        config: {{ id: mine, path: {}, transforms: [{{ type: filter, ops: [d] }}, {{ type: mask, tables: [public.items], columns: [kind], with: {{ fixed: x }} }}] }}\n      - type: redis\n        config: {{ id: routed, url: \"{}\", stream: \"{stream}.${{table}}\", transforms: [{{ type: route, regex: 'public\\.(misc)?.*', to: \"{route_to}\" }}] }}\n",
            mine.display(),
            env("SLUICE_TEST_REDIS_URL"),
        )
    };
    // `$1` is empty for items: that step fails on its events.
    let config = pg::pipeline(db, all.to_str().unwrap(), None) + &sinks("$1");
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap(), "--api-addr", "127.0.0.1:0"], dir.path());
    wait_for_slot(db);
    sql(
        db,
        "INSERT INTO misc VALUES (1), (2), (3); DELETE FROM misc WHERE id = 3; INSERT INTO items VALUES (1, 'secret')",
    );
    wait_until(Duration::from_secs(60), "every event in the plain file sink", || lines(&all).len() == 5);
    wait_until(Duration::from_secs(60), "the misc events in their routed stream", || {
        redis_positions(&format!("{stream}.misc")).len() == 4
    });
    let addr = api::api_addr(dir.path());
    let counted = |sink: &str| -> Vec<(String, u64, u64, u64)> {
        let view = api::get(&addr, "/pipelines/pg", None).json();
        let sinks = view["sinks"].as_array().unwrap().clone();
        let sink = sinks.into_iter().find(|s| s["id"] == sink).unwrap();
        sink["transforms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let n = |field: &str| s[field].as_u64().unwrap();
                (s["type"].as_str().unwrap().to_string(), n("events_in"), n("dropped"), n("errored"))
            })
            .collect()
    };
    wait_until(Duration::from_secs(60), "the failed event counted", || {
        counted("routed").first().is_some_and(|s| s.3 == 1)
    });
    let step = |kind: &str, events_in, dropped| (kind.to_string(), events_in, dropped, 0);
    assert_eq!(counted("mine"), [step("filter", 5, 1), step("mask", 4, 0)]);
    pg::stop(child, dir.path());

    let ops = |path: &std::path::Path| -> Vec<String> {
        lines(path).iter().map(|e| format!("{} {}", e["op"].as_str().unwrap(), e["table"].as_str().unwrap())).collect()
    };
    assert_eq!(ops(&all), ["c public.misc", "c public.misc", "c public.misc", "d public.misc", "c public.items"]);
    assert_eq!(ops(&mine), ["c public.misc", "c public.misc", "c public.misc", "c public.items"]);
    assert_eq!(lines(&mine)[3]["after"]["kind"], "x");
    assert_eq!(lines(&all)[4]["after"]["kind"], "secret", "the other sinks get the value");

    let letter = the_dead_letter(config.to_str().unwrap(), dir.path());
    assert!(letter.contains("gives table public.items an empty destination"), "{letter}");
    // Fixed, the sink's route gives the letter a stream of its own.
    let fixed = pg::pipeline(db, all.to_str().unwrap(), None) + &sinks("fixed_${name}");
    let fixed = write_config(dir.path(), &fixed);
    let retried = run(&["dlq", "retry", "--all", "-c", fixed.to_str().unwrap()], dir.path());
    assert!(retried.status.success(), "{}", stderr(&retried));
    assert!(String::from_utf8_lossy(&retried.stdout).contains("1 delivered and removed, 0 kept"));
    assert_eq!(redis_positions(&format!("{stream}.fixed_items")).len(), 1);
    pg::drop_slots(db);
}

/// The JSON lines in the committed files whose path holds `part`.
fn object_lines(root: &std::path::Path, part: &str) -> usize {
    let mut count = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().contains(part) && path.extension().is_some_and(|e| e == "jsonl") {
                count += std::fs::read_to_string(&path).unwrap_or_default().lines().count();
            }
        }
    }
    count
}

#[test]
fn bad_transforms_are_refused_by_validate_with_the_step_and_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let base = generator_to_file(1, 1, None, "out.jsonl");
    let with = |steps: &str| base.replace("    sinks:\n", &format!("    transforms:\n{steps}    sinks:\n"));
    let cases = [
        ("      - { type: unwrapped }\n", "unknown variant `unwrapped`"),
        (
            "      - { type: filter, ops: [c] }\n      - { type: filter, where: [{ column: email, regex: '(' }] }\n",
            "pipelines[0].transforms[1]",
        ),
        ("      - { type: mask, columns: [email], with: { sha256: { salt: \"\" } } }\n", "salt is empty"),
        ("      - { type: columns, include: [a], exclude: [b] }\n", "give include or exclude, not both"),
        ("      - { type: route, regex: 'public\\.(.*)', to: \"x_$2\" }\n", "the regex has 1"),
        ("      - { type: route, to: \"x_$1\" }\n", "no regex with groups"),
    ];
    for (steps, said) in cases {
        let config = write_config(dir.path(), &with(steps));
        let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
        assert_eq!(output.status.code(), Some(2), "{steps}: {}", stderr(&output));
        assert!(stderr(&output).contains(said), "{steps}: {}", stderr(&output));
        assert!(!dir.path().join("out.jsonl").exists());
    }
    let regex = write_config(dir.path(), &with("      - { type: filter, where: [{ column: email, regex: '(' }] }\n"));
    let output = run(&["validate", "-c", regex.to_str().unwrap()], dir.path());
    assert!(stderr(&output).contains("the regex for column \"email\" does not compile"), "{}", stderr(&output));
}
