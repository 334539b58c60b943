//! VRL scripts (`type: vrl`): refused by `sluice validate` with VRL's own
//! message at the script's line and column; a runtime error on one event
//! of a thousand sends that one to the sink's dead letter queue while the
//! rest land; `sluice dlq retry` with the script fixed delivers it; a call
//! a replay would not repeat is refused next to an exactly-once sink.

mod common;

use std::time::Duration;

use common::pg::{drop_slots, fresh_database, sql, stop, wait_for_slot};
use common::*;

#[test]
fn validate_shows_vrls_error_at_its_line_and_column_and_refuses_now_beside_an_exactly_once_sink() {
    let dir = tempfile::tempdir().unwrap();
    let base = generator_to_file(1, 1, None, "out.jsonl");
    let with = |steps: &str| base.replace("    sinks:\n", &format!("    transforms:\n{steps}    sinks:\n"));
    let script = dir.path().join("fix.vrl");
    std::fs::write(&script, ".after.total = 1\n.after.label = upcase(.after.total)\n").unwrap();
    let cases = [
        (format!("      - {{ type: vrl, file: {} }}\n", script.display()), "line 2, column 23: invalid argument type"),
        ("      - { type: vrl, source: \".after.x = \" }\n".to_string(), "line 1, column"),
        ("      - { type: vrl, file: missing.vrl }\n".to_string(), "cannot read \"missing.vrl\""),
        (
            // The file sink is exactly-once.
            "      - { type: vrl, source: \".after.seen = now()\" }\n".to_string(),
            "the script calls now(), whose value a replay would not repeat, and sink \"local\" is exactly-once",
        ),
    ];
    for (steps, said) in cases {
        let config = write_config(dir.path(), &with(&steps));
        let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
        assert_eq!(output.status.code(), Some(2), "{steps}: {}", stderr(&output));
        assert!(stderr(&output).contains(said), "{steps}: {}", stderr(&output));
        assert!(stderr(&output).contains("pipelines[0].transforms[0]"), "{}", stderr(&output));
    }
    // An at-least-once sink may take it.
    let at_least_once = with("      - { type: vrl, source: \".after.seen = now()\" }\n").replace(
        "type: file\n        config: { id: local, path: out.jsonl }",
        "type: stdout\n        config: { id: local }",
    );
    assert!(at_least_once.contains("type: stdout"));
    let config = write_config(dir.path(), &at_least_once);
    let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(!said.contains("can fail on an event"), "a script without `!` cannot fail: {said}");

    // A script that can fail, in the pipeline's list: accepted, with a
    // note that a failure there stops the pipeline.
    let config = write_config(dir.path(), &with("      - { type: vrl, source: \".after.n = to_int!(.after.id)\" }\n"));
    let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.contains("transform 1 (vrl) can fail on an event: its script calls a function with `!`")
            && said.contains("a failure stops the pipeline"),
        "{said}"
    );
}

#[test]
fn a_runtime_error_dead_letters_the_one_event_and_a_fixed_script_delivers_it() {
    let db = "vrl_runtime";
    fresh_database(db);
    sql(db, "CREATE TABLE readings (id int PRIMARY KEY, code text)");
    let dir = tempfile::tempdir().unwrap();
    let stream = unique("vrl");
    // Redis takes a dead letter again (`redeliver`); the file sink, which
    // writes in position order, cannot.
    let sink = |script: &str| {
        format!(
            "      - type: redis\n        config:\n          id: parsed\n          url: \"{}\"\n          stream: {stream}\n          transforms:\n            - type: vrl\n              source: |\n{}",
            env("SLUICE_TEST_REDIS_URL"),
            script.lines().map(|l| format!("                {l}\n")).collect::<String>()
        )
    };
    let held = || common::debezium::redis_payloads(&stream);
    let failing = "if .op == \"c\" {\n  .after.value = parse_int!(.after.code)\n}";
    let config = common::pgsink::pipeline(db, &[]) + &sink(failing);
    let config = write_config(dir.path(), &config);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    // A thousand rows in one transaction; row 500's code is not a number.
    sql(
        db,
        "INSERT INTO readings SELECT i, CASE WHEN i = 500 THEN 'x' ELSE i::text END FROM generate_series(1, 1000) i",
    );
    wait_until(Duration::from_secs(60), "the 999 good rows", || held().len() >= 999);
    stop(child, dir.path());
    let rows = held();
    assert_eq!(rows.len(), 999);
    let parsed = |e: &serde_json::Value| e["after"]["code"].as_str().and_then(|c| c.parse::<i64>().ok());
    assert!(rows.iter().all(|e| e["after"]["value"].as_i64() == parsed(e)), "each value is its code, parsed");
    assert!(!rows.iter().any(|e| e["after"]["id"] == 500));

    let letter = the_dead_letter(config.to_str().unwrap(), dir.path());
    assert!(letter.contains("transform 1 (vrl): the script failed at line 2, column 18"), "{letter}");
    assert!(letter.contains("parse_int"), "{letter}");
    assert!(letter.contains("\"code\": \"x\""), "the letter holds the event as it came: {letter}");

    let fixed = "if .op == \"c\" {\n  .after.value = parse_int(.after.code) ?? -1\n}";
    let fixed = write_config(dir.path(), &(common::pgsink::pipeline(db, &[]) + &sink(fixed)));
    let retried = run(&["dlq", "retry", "--all", "-c", fixed.to_str().unwrap()], dir.path());
    let said = format!("{}{}", String::from_utf8_lossy(&retried.stdout), stderr(&retried));
    assert!(retried.status.success(), "{said}");
    assert!(String::from_utf8_lossy(&retried.stdout).contains("1 delivered and removed, 0 kept"));
    let rows = held();
    assert_eq!(rows.len(), 1000);
    assert_eq!((rows[999]["after"]["id"].as_i64(), rows[999]["after"]["value"].as_i64()), (Some(500), Some(-1)));
    drop_slots(db);
}
