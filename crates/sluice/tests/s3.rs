//! The object storage sink against the test S3 server and local disk:
//! kill -9 at any moment (mid multipart upload, between a commit and the
//! checkpoint, at random) leaves every event in exactly one file; and
//! Parquet read back matches PostgreSQL's rows and types.

mod common;

use std::time::Duration;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_schema_check::*;
use common::lake::*;
use common::pg::*;
use common::*;

fn generator_pipeline(id: &str, tx_count: u64, rate: u64, sinks: &str) -> String {
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: gen1, tx_count: {tx_count}, rows_per_tx: 10, events_per_sec: {rate}, tables: [orders, items] }} }}\n    sinks:\n{sinks}    batch: {{ max_events: 500, max_ms: 20 }}\n"
    )
}

fn log_of(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default()
}

#[test]
fn kill_9_mid_multipart_upload_and_after_commits_leaves_each_event_in_one_file() {
    let prefix = unique("multipart");
    let dir = tempfile::tempdir().unwrap();
    // JSON Lines of about 330 bytes an event: 11 MiB files in 5 MiB parts.
    let sinks = format!(
        "      - type: s3\n        config: {{ id: big, {}, prefix: {prefix}, format: jsonl, max_file_bytes: 11534336, part_size_bytes: 5242880 }}\n",
        s3_target()
    );
    let config = write_config(dir.path(), &generator_pipeline(&prefix, 10_000, 1_000_000, &sinks));
    let config = config.to_str().unwrap();
    // After a claim and before its file: the next run writes that very
    // file again from the replay.
    for failpoint in ["s3.after_part=2", "s3.after_commit=1", "s3.after_claim=2", "s3.after_part=1"] {
        let output = sluice()
            .args(["run", "-c", config])
            .current_dir(dir.path())
            .env("SLUICE_FAILPOINT", failpoint)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{failpoint} was not reached: {}", stderr(&output));
        assert!(stderr(&output).contains("failpoint"), "{}", stderr(&output));
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let files = s3_files(&prefix);
    let count = assert_exactly_once(&files, "big", &generator_positions(10_000, 10));
    assert!(count >= 4, "expected several multipart files, got {count}");
    let marker = dir.path().join("sluice-data/s3").join(&prefix).join("big/upload-in-flight");
    assert!(!marker.exists(), "the record of the aborted upload is gone");
}

/// What a fleet's owner that stalled past its lease and the instance that
/// took its pipeline over do to one prefix: two writers of the same
/// stream, cutting files at other places. They meet at the claims, and
/// each event ends in one file.
#[test]
fn two_writers_of_one_prefix_cutting_files_differently_leave_each_event_in_one_file() {
    let prefix = unique("claims");
    let runs: Vec<_> = [700, 1000]
        .into_iter()
        .map(|events| {
            let dir = tempfile::tempdir().unwrap();
            let sinks = format!(
                "      - type: s3\n        config: {{ id: pq, {}, prefix: {prefix}, max_file_events: {events}, timeout_secs: 5 }}\n",
                s3_target()
            );
            let config = write_config(dir.path(), &generator_pipeline(&prefix, 3000, 10_000, &sinks));
            (dir, config)
        })
        .collect();
    let children: Vec<_> =
        runs.iter().map(|(dir, config)| spawn(&["run", "-c", config.to_str().unwrap()], dir.path())).collect();
    for (mut child, (dir, _)) in children.into_iter().zip(&runs) {
        let status = child.wait_exit(Duration::from_secs(120));
        assert!(status.success(), "{}", log_of(dir.path()));
    }
    let refused: usize = runs.iter().map(|(dir, _)| log_of(dir.path()).matches("another writer claimed").count()).sum();
    eprintln!("claims refused to the slower writer: {refused}");
    assert!(refused > 0, "the writers never met at a claim, so this run tested nothing");
    assert_exactly_once(&s3_files(&prefix), "pq", &generator_positions(3000, 10));
}

#[test]
fn kill_9_at_random_moments_never_duplicates_or_loses_an_event_in_s3_or_on_disk() {
    let prefix = unique("crash");
    let dir = tempfile::tempdir().unwrap();
    let sinks = format!(
        "      - type: s3\n        config: {{ id: pq, {}, prefix: {prefix}, max_file_events: 1500 }}\n      - type: s3\n        config: {{ id: local, local: lake, format: jsonl, compression: gzip, max_file_events: 1100 }}\n",
        s3_target()
    );
    let config = write_config(dir.path(), &generator_pipeline(&prefix, 3000, 20_000, &sinks));
    let config = config.to_str().unwrap();
    let lake = dir.path().join("lake");
    for round in 1..=4 {
        let mut child = spawn(&["run", "-c", config], dir.path());
        wait_until(Duration::from_secs(60), "files", || {
            local_files(&lake).iter().map(|(n, b)| positions(n, b).len()).sum::<usize>() >= round * 5000
        });
        child.kill9();
    }
    let output = run(&["run", "-c", config], dir.path());
    assert!(output.status.success(), "{}", log_of(dir.path()));
    let expected = generator_positions(3000, 10);
    let files = s3_files(&prefix);
    assert!(assert_exactly_once(&files, "pq", &expected) > 10);
    assert!(
        files.iter().all(|(name, _)| name.contains("/table=") && name.contains("/date=2026-01-01/")),
        "Hive layout"
    );
    assert!(assert_exactly_once(&local_files(&lake), "local", &expected) > 10);
    let staging = lake.join(".sluice-staging/local");
    assert_eq!(std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0), 0, "staged files are cleaned up");
}

#[test]
fn parquet_read_back_matches_postgres_rows_and_types_and_a_schema_change_starts_a_new_file() {
    let db = "e2e_parquet";
    fresh_database(db);
    sql(
        db,
        "CREATE TABLE typed (id bigint PRIMARY KEY, amount numeric(12,2), name text, paid boolean, score double precision, \
         born date, seen timestamptz, at timestamp, doc jsonb, raw bytea)",
    );
    prepare_replication(db, "typed");
    let dir = tempfile::tempdir().unwrap();
    let sink = "      - type: s3\n        config: { id: lake, local: lake, max_file_age_secs: 1 }\n";
    let text = pipeline(db, "unused.jsonl", None);
    let text = text.replace(&text[text.find("      - type: file").unwrap()..], sink);
    let config = write_config(dir.path(), &text);
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    sql(
        db,
        "INSERT INTO typed VALUES \
         (1, 12.50, 'ada', true, 1.5, '2024-02-29', '2024-05-06 07:08:09.123456+00', '2024-05-06 07:08:09', '{\"a\": [1, 2]}', '\\x00ff'), \
         (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL); \
         UPDATE typed SET amount = -0.01, name = 'bob' WHERE id = 2; \
         DELETE FROM typed WHERE id = 1; \
         ALTER TABLE typed ADD COLUMN note text; \
         INSERT INTO typed (id, note) VALUES (3, 'after the change')",
    );
    let lake = dir.path().join("lake");
    let rows =
        || -> usize { local_files(&lake).iter().flat_map(|(_, b)| parquet_batches(b)).map(|b| b.num_rows()).sum() };
    wait_until(Duration::from_secs(60), "five rows in committed files", || rows() >= 5);
    stop(child, dir.path());

    let files = local_files(&lake);
    assert_eq!(
        files.len(),
        2,
        "the schema change starts a second file: {:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert!(files.iter().all(|(name, _)| name.starts_with("table=public.typed/date=")));
    let first = parquet_batches(&files[0].1);
    let batch = &first[0];
    assert_eq!(batch.num_rows(), 4);
    assert_types(batch);
    let ops: Vec<&str> =
        (0..4).map(|i| batch.column_by_name("sluice_op").unwrap().as_string::<i32>().value(i)).collect();
    assert_eq!(ops, ["c", "c", "u", "d"]);
    let id = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>();
    assert_eq!((0..4).map(|i| id.value(i)).collect::<Vec<_>>(), [1, 2, 2, 1]);
    let amount = batch.column_by_name("amount").unwrap().as_primitive::<Decimal128Type>();
    assert_eq!(amount.value_as_string(0), "12.50");
    assert!(amount.is_null(1));
    assert_eq!(amount.value_as_string(2), "-0.01");
    assert_eq!(batch.column_by_name("name").unwrap().as_string::<i32>().value(2), "bob");
    assert!(batch.column_by_name("paid").unwrap().as_boolean().value(0));
    assert_eq!(batch.column_by_name("score").unwrap().as_primitive::<Float64Type>().value(0), 1.5);
    assert_eq!(batch.column_by_name("born").unwrap().as_primitive::<Date32Type>().value(0), 19_782);
    let seen = batch.column_by_name("seen").unwrap().as_primitive::<TimestampMicrosecondType>();
    assert_eq!(seen.value(0), 1_714_979_289_123_456);
    let at = batch.column_by_name("at").unwrap().as_primitive::<TimestampMicrosecondType>();
    assert_eq!(at.value(0), 1_714_979_289_000_000);
    let doc: serde_json::Value =
        serde_json::from_str(batch.column_by_name("doc").unwrap().as_string::<i32>().value(0)).unwrap();
    assert_eq!(doc, serde_json::json!({"a": [1, 2]}));
    assert_eq!(batch.column_by_name("raw").unwrap().as_binary::<i32>().value(0), [0u8, 255]);
    // The delete shows the old row as the source sent it: the key.
    assert!(batch.column_by_name("name").unwrap().is_null(3));
    let second = &parquet_batches(&files[1].1)[0];
    assert_eq!(second.column_by_name("note").unwrap().as_string::<i32>().value(0), "after the change");
    assert_eq!(second.column_by_name("id").unwrap().as_primitive::<Int64Type>().value(0), 3);
}

mod arrow_schema_check {
    use arrow_array::RecordBatch;
    use arrow_schema::{DataType, TimeUnit};

    /// Each column has the type its declared PostgreSQL type maps to.
    pub fn assert_types(batch: &RecordBatch) {
        let utc = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let expected = [
            ("sluice_commit_time", utc.clone()),
            ("id", DataType::Int64),
            ("amount", DataType::Decimal128(12, 2)),
            ("name", DataType::Utf8),
            ("paid", DataType::Boolean),
            ("score", DataType::Float64),
            ("born", DataType::Date32),
            ("seen", utc),
            ("at", DataType::Timestamp(TimeUnit::Microsecond, None)),
            ("doc", DataType::Utf8),
            ("raw", DataType::Binary),
        ];
        let schema = batch.schema();
        for (name, kind) in expected {
            assert_eq!(schema.field_with_name(name).unwrap().data_type(), &kind, "column {name}");
        }
        // jsonb is Parquet's JSON logical type, which Arrow reads as its JSON extension.
        assert_eq!(schema.field_with_name("doc").unwrap().extension_type_name(), Some("arrow.json"));
    }
}

#[test]
fn a_wrong_secret_key_stops_a_required_s3_sink_with_a_hint_instead_of_retrying() {
    let prefix = unique("wrongkey");
    let dir = tempfile::tempdir().unwrap();
    let target = s3_target().replace(
        &format!("secret_access_key: {}", env("SLUICE_TEST_S3_SECRET_KEY")),
        "secret_access_key: not-the-secret",
    );
    let sinks = format!("      - {{ type: s3, config: {{ id: lake, {target}, prefix: {prefix}, format: jsonl }} }}\n");
    let config = write_config(dir.path(), &generator_pipeline(&prefix, 5, 1000, &sinks));
    // Spawned, not run to the end: before the fix it retried for ever.
    let mut child = sluice()
        .args(["run", "-c", config.to_str().unwrap(), "--api-addr", "off"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = None;
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(Duration::from_secs(60), "sluice to stop on the refused credentials", || {
            exited = child.try_wait().unwrap();
            exited.is_some()
        })
    }));
    if waited.is_err() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().unwrap();
    let text = stderr(&output);
    assert!(waited.is_ok(), "still retrying after 60 s: {text}");
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("hint:") && text.contains("secret_access_key"), "{text}");
    assert!(!text.contains("not-the-secret"), "the secret is not printed: {text}");
    assert!(s3_files(&prefix).is_empty(), "nothing was written");
}
