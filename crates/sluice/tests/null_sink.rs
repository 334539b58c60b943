//! The `null` sink, added through the sink registry alone (one folder and
//! one list line): `sluice validate` lists it with its guarantee, and a run
//! into it finishes with the checkpoint at the last event.

mod common;

use common::*;

const GENERATOR_TO_NULL: &str = "pipelines:\n  - name: bench\n    source: { type: generator, config: { id: gen1, tx_count: 300, rows_per_tx: 7 } }\n    sinks:\n      - type: null\n        config: { id: drop }\n    batch: { max_events: 500, max_ms: 20 }\n";

#[test]
fn validate_lists_a_null_sink_and_its_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), GENERATOR_TO_NULL);
    let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.contains(
            "bench     gen1 (generator)  drop  null  yes       at-least-once (dedup: none needed: nothing is kept)"
        ),
        "{table}"
    );
}

#[test]
fn a_generator_run_into_a_null_sink_finishes_and_checkpoints_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), GENERATOR_TO_NULL);
    let config = config.to_str().unwrap();
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));

    let output = run(&["checkpoints", "list", "-c", config], dir.path());
    let listing = String::from_utf8_lossy(&output.stdout);
    assert!(listing.contains("gen1::sink::drop  gen:300:6"), "{listing}");
}

#[test]
fn an_unknown_field_of_a_null_sink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &GENERATOR_TO_NULL.replace("{ id: drop }", "{ id: drop, path: x }"));
    let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("unknown field `path`"), "{}", stderr(&output));
}
