//! What adversarial testing found against a real PostgreSQL: partitioned
//! tables, REPLICA IDENTITY FULL keys, dates past year 9999 or before
//! year 1, and keyless tables in a publication.

mod common;

use common::*;
use serde_json::json;
use sluice_config::KeylessTables;
use sluice_core::{AckWatermark, Event, Op, Source};

fn tables(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.table.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_tables_changes_arrive_under_the_roots_name() {
    fresh_database("t_parts").await;
    sql(
        "t_parts",
        "CREATE TABLE meas (day date, id int, v int, PRIMARY KEY (day, id)) PARTITION BY RANGE (day);
         CREATE TABLE meas_2024 PARTITION OF meas FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
         CREATE TABLE meas_2025 PARTITION OF meas FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');",
    )
    .await;
    let mut config = config("t_parts", "parts");
    config.tables = vec!["public.meas".into()];
    let mut source = started(config, None, AckWatermark::default()).await;
    let published = sql("t_parts", "SELECT pubviaroot FROM pg_publication WHERE pubname = 'sluice_parts'").await;
    assert_eq!(published.first("pubviaroot"), Some("t"));
    sql(
        "t_parts",
        "INSERT INTO meas VALUES ('2024-03-01', 1, 1), ('2025-03-01', 2, 1);
         UPDATE meas SET v = 2 WHERE id = 1;
         UPDATE meas SET day = '2025-06-01' WHERE id = 1;
         DELETE FROM meas WHERE id = 2;",
    )
    .await;
    let events = collect(&mut source, 6).await;
    assert_eq!(tables(&events), vec!["public.meas"; 6]);
    // Moving a row to another partition is a delete and an insert.
    let ops: Vec<Op> = events.iter().map(|e| e.op).collect();
    assert_eq!(ops, [Op::Insert, Op::Insert, Op::Update, Op::Delete, Op::Insert, Op::Delete]);
    assert_eq!(serde_json::to_value(&events[2]).unwrap()["key"], json!({"day": "2024-03-01", "id": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_publication_without_publish_via_root_still_names_changes_by_the_root() {
    fresh_database("t_parts_own").await;
    sql(
        "t_parts_own",
        "CREATE TABLE meas (day date, id int, PRIMARY KEY (day, id)) PARTITION BY RANGE (day);
         CREATE TABLE meas_2024 PARTITION OF meas FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
         CREATE TABLE meas_2025 PARTITION OF meas FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
         CREATE PUBLICATION own FOR TABLE meas;",
    )
    .await;
    let mut config = config("t_parts_own", "parts_own");
    config.tables = vec!["public.meas".into()];
    config.publication = Some("own".into());
    config.create_publication = false;
    let mut source = started(config, None, AckWatermark::default()).await;
    let listed =
        sql("t_parts_own", "SELECT tablename FROM pg_publication_tables WHERE pubname = 'own' ORDER BY 1").await;
    assert_eq!(listed.first("tablename"), Some("meas_2024"), "the server publishes by partition here");
    sql("t_parts_own", "INSERT INTO meas VALUES ('2024-03-01', 1), ('2025-04-01', 2), ('2024-05-01', 3)").await;
    let events = collect(&mut source, 3).await;
    assert_eq!(tables(&events), vec!["public.meas"; 3]);
    // Two partitions of one shape are one version of the table: rows that
    // alternate between them are no schema change to the sinks.
    let versions: Vec<u32> = events.iter().map(|e| e.schema_version).collect();
    assert_eq!(versions, vec![versions[0]; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_replica_identity_full_every_change_of_a_row_has_its_primary_key() {
    fresh_database("t_full_key").await;
    sql(
        "t_full_key",
        "CREATE TABLE f (id int PRIMARY KEY, n int, big text);
         ALTER TABLE f ALTER COLUMN big SET STORAGE EXTERNAL;
         ALTER TABLE f REPLICA IDENTITY FULL;",
    )
    .await;
    let mut source = started(config("t_full_key", "full_key"), None, AckWatermark::default()).await;
    let mut statements = "INSERT INTO f VALUES (1, 0, repeat('x', 10000));".to_string();
    for n in 1..=12 {
        statements.push_str(&format!("UPDATE f SET n = {n} WHERE id = 1;"));
    }
    sql("t_full_key", &statements).await;
    let events = collect(&mut source, 13).await;
    for event in &events {
        let json = serde_json::to_value(event).unwrap();
        assert_eq!(json["key"], json!({"id": 1}), "{json}");
        // The old row is whole under FULL, so the unchanged value is filled in.
        assert_eq!(json["after"]["big"].as_str().map(str::len), Some(10_000), "{json}");
        assert!(json.get("unchanged").is_none(), "{json}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dates_and_timestamps_beyond_four_digit_years_are_iso_8601() {
    fresh_database("t_far_dates").await;
    sql("t_far_dates", "CREATE TABLE d (id int PRIMARY KEY, ts timestamp, tstz timestamptz, d date)").await;
    let mut source = started(config("t_far_dates", "far_dates"), None, AckWatermark::default()).await;
    sql(
        "t_far_dates",
        "INSERT INTO d VALUES
           (1, '294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.999999+00', '5874897-12-31'),
           (2, '4713-01-01 00:00:00 BC', '4713-01-01 00:00:00+00 BC', '4713-01-01 BC'),
           (3, 'infinity', '-infinity', '0001-01-01 BC')",
    )
    .await;
    let events = collect(&mut source, 3).await;
    let rows: Vec<serde_json::Value> = events.iter().map(after_json).collect();
    assert_eq!(
        rows[0],
        json!({"id": 1, "ts": "+294276-12-31T23:59:59.999999", "tstz": "+294276-12-31T23:59:59.999999Z", "d": "+5874897-12-31"})
    );
    assert_eq!(
        rows[1],
        json!({"id": 2, "ts": "-004712-01-01T00:00:00", "tstz": "-004712-01-01T00:00:00Z", "d": "-004712-01-01"})
    );
    assert_eq!(rows[2], json!({"id": 3, "ts": "infinity", "tstz": "-infinity", "d": "0000-01-01"}));
}

async fn keyless_setup(database: &str) {
    fresh_database(database).await;
    sql(database, "CREATE TABLE keyed (id int PRIMARY KEY); CREATE TABLE loose (v int);").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_table_is_left_out_by_default_so_the_applications_writes_go_on() {
    keyless_setup("t_keyless_skip").await;
    let mut source = started(config("t_keyless_skip", "keyless_skip"), None, AckWatermark::default()).await;
    sql("t_keyless_skip", "INSERT INTO loose VALUES (1)").await;
    // Before, the publication made PostgreSQL refuse this statement.
    sql("t_keyless_skip", "UPDATE loose SET v = 2; DELETE FROM loose; INSERT INTO keyed VALUES (1)").await;
    let events = collect(&mut source, 1).await;
    assert_eq!(tables(&events), ["public.keyed"]);
    let listed =
        sql("t_keyless_skip", "SELECT tablename FROM pg_publication_tables WHERE pubname = 'sluice_keyless_skip'")
            .await;
    assert_eq!(listed.rows.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_tables_inserts_only_captures_inserts_and_keeps_updates_working() {
    keyless_setup("t_keyless_ins").await;
    let mut config = config("t_keyless_ins", "keyless_ins");
    config.keyless_tables = KeylessTables::InsertsOnly;
    let mut source = started(config, None, AckWatermark::default()).await;
    sql("t_keyless_ins", "INSERT INTO loose VALUES (1); UPDATE loose SET v = 2; DELETE FROM loose;").await;
    sql("t_keyless_ins", "UPDATE keyed SET id = 2; INSERT INTO keyed VALUES (7)").await;
    let events = collect(&mut source, 2).await;
    assert_eq!(tables(&events), ["public.loose", "public.keyed"]);
    assert_eq!(after_json(&events[0]), json!({"v": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_tables_set_replica_identity_full_captures_every_change() {
    keyless_setup("t_keyless_full").await;
    let mut config = config("t_keyless_full", "keyless_full");
    config.keyless_tables = KeylessTables::SetReplicaIdentityFull;
    let mut source = started(config, None, AckWatermark::default()).await;
    let identity = sql("t_keyless_full", "SELECT relreplident FROM pg_class WHERE relname = 'loose'").await;
    assert_eq!(identity.first("relreplident"), Some("f"));
    sql("t_keyless_full", "INSERT INTO loose VALUES (1); UPDATE loose SET v = 2; DELETE FROM loose;").await;
    let events = collect(&mut source, 3).await;
    let ops: Vec<Op> = events.iter().map(|e| e.op).collect();
    assert_eq!(ops, [Op::Insert, Op::Update, Op::Delete]);
    assert_eq!(serde_json::to_value(&events[2]).unwrap()["before"], json!({"v": 2}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_snapshot_of_a_partitioned_table_names_its_rows_by_the_root() {
    fresh_database("t_parts_snap").await;
    sql(
        "t_parts_snap",
        "CREATE TABLE meas (day date, id int, PRIMARY KEY (day, id)) PARTITION BY RANGE (day);
         CREATE TABLE meas_2024 PARTITION OF meas FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
         CREATE TABLE meas_2025 PARTITION OF meas FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
         INSERT INTO meas VALUES ('2024-03-01', 1), ('2025-03-01', 2);",
    )
    .await;
    let mut config = config("t_parts_snap", "parts_snap");
    config.tables = vec!["public.meas".into()];
    config.snapshot.mode = sluice_config::SnapshotMode::Initial;
    let mut source = started(config, None, AckWatermark::default()).await;
    let read = collect(&mut source, 2).await;
    assert!(read.iter().all(|e| e.op == Op::Read), "{read:?}");
    assert_eq!(tables(&read), vec!["public.meas"; 2]);
    sql("t_parts_snap", "INSERT INTO meas VALUES ('2025-04-01', 3)").await;
    let streamed = collect(&mut source, 1).await;
    assert_eq!(tables(&streamed), ["public.meas"]);
    assert_eq!(read[0].schema_version, streamed[0].schema_version, "snapshot and stream agree on the shape");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_held_back_by_slow_sinks_outlasts_the_databases_statement_timeout() {
    fresh_database("t_snap_timeout").await;
    sql(
        "t_snap_timeout",
        "CREATE TABLE big (id int PRIMARY KEY, pad text);
         INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 200000) g;",
    )
    .await;
    // For every later session in the database, the snapshot's included.
    // Two seconds, so the source's own short queries pass on a busy machine.
    sql("t_snap_timeout", "ALTER DATABASE t_snap_timeout SET statement_timeout = '2s'").await;
    sql("t_snap_timeout", "ALTER DATABASE t_snap_timeout SET idle_in_transaction_session_timeout = '2s'").await;
    let mut config = config("t_snap_timeout", "snap_timeout");
    config.tables = vec!["public.big".into()];
    config.snapshot.mode = sluice_config::SnapshotMode::Initial;
    // One query for the whole table, far more than the queues and the
    // socket hold: it is still sending while nothing is taken.
    config.snapshot.chunk_size = 1_000_000;
    let mut source = started(config, None, AckWatermark::default()).await;
    let mut events = Vec::new();
    poll_until(&mut source, &mut events, 1000).await;
    // What a slow sink does to the reader: nothing is taken for a while.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    poll_until(&mut source, &mut events, 200_000).await;
    let ids: Vec<i64> = events.iter().map(|e| after_json(e)["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, (1..=200_000).collect::<Vec<i64>>());
    assert!(events.iter().all(|e| e.op == Op::Read));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_attached_and_detached_mid_stream_lose_nothing() {
    fresh_database("t_attach").await;
    sql(
        "t_attach",
        "CREATE TABLE meas (day date, id int, v int, PRIMARY KEY (day, id)) PARTITION BY RANGE (day);
         CREATE TABLE meas_2024 PARTITION OF meas FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');",
    )
    .await;
    let mut config = config("t_attach", "attach");
    config.tables = vec!["public.meas".into()];
    let mut source = started(config, None, AckWatermark::default()).await;
    sql(
        "t_attach",
        "INSERT INTO meas VALUES ('2024-03-01', 1, 1);
         CREATE TABLE meas_2025 (LIKE meas INCLUDING ALL);
         INSERT INTO meas_2025 VALUES ('2025-02-01', 2, 0);
         ALTER TABLE meas ATTACH PARTITION meas_2025 FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
         INSERT INTO meas VALUES ('2025-03-01', 3, 1);
         UPDATE meas SET v = 5 WHERE id = 2;
         CREATE TABLE meas_2026 PARTITION OF meas FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
         INSERT INTO meas VALUES ('2026-01-05', 4, 1);
         ALTER TABLE meas DETACH PARTITION meas_2024;
         INSERT INTO meas_2024 VALUES ('2024-05-01', 5, 1);
         INSERT INTO meas VALUES ('2026-02-01', 6, 1);",
    )
    .await;
    // The row written into meas_2025 before it was attached was no change
    // of meas; the row written into meas_2024 after it was detached is not
    // either. Every change of meas in between arrives, by meas's name.
    let events = collect(&mut source, 5).await;
    assert_eq!(tables(&events), vec!["public.meas"; 5]);
    let changes: Vec<(Op, i64)> = events.iter().map(|e| (e.op, after_json(e)["id"].as_i64().expect("an id"))).collect();
    assert_eq!(changes, [(Op::Insert, 1), (Op::Insert, 3), (Op::Update, 2), (Op::Insert, 4), (Op::Insert, 6)]);
}

/// After `ATTACH` and `DETACH PARTITION`, each partition's changes go by
/// its new place within seconds on every version, though pgoutput had
/// seen both partitions before: before 15 the source renews the
/// publication, which makes pgoutput decide afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_and_detached_partitions_are_routed_afresh_within_seconds() {
    fresh_database("t_reattach").await;
    sql(
        "t_reattach",
        "CREATE TABLE meas (id int PRIMARY KEY, v int) PARTITION BY RANGE (id);
         CREATE TABLE meas_low PARTITION OF meas FOR VALUES FROM (0) TO (100);
         CREATE TABLE meas_high (LIKE meas INCLUDING ALL);",
    )
    .await;
    let mut config = config("t_reattach", "reattach");
    config.tables = vec!["public.meas".into()];
    let mut source = started(config, None, AckWatermark::default()).await;
    sql("t_reattach", "INSERT INTO meas_high VALUES (100, 0)").await;
    sql("t_reattach", "INSERT INTO meas VALUES (1, 0)").await;
    assert_eq!(ids(&collect(&mut source, 1).await), [1]);
    sql("t_reattach", "ALTER TABLE meas ATTACH PARTITION meas_high FOR VALUES FROM (100) TO (1000)").await;
    sql("t_reattach", "ALTER TABLE meas DETACH PARTITION meas_low").await;
    // A row into each, every round, until the attached one's arrives.
    let mut seen = Vec::new();
    for round in 0..40 {
        sql(
            "t_reattach",
            &format!(
                "INSERT INTO meas_high VALUES ({}, 0); INSERT INTO meas_low VALUES ({}, 0)",
                200 + round,
                10 + round
            ),
        )
        .await;
        let mut events = Vec::new();
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), source.poll(&mut events)).await;
        seen.extend(ids(&events));
        if seen.iter().any(|id| *id >= 200) {
            break;
        }
    }
    let first = seen
        .iter()
        .position(|id| *id >= 200)
        .unwrap_or_else(|| panic!("the attached partition never arrived: {seen:?}"));
    assert!(seen[first..].iter().all(|id| *id >= 200), "the detached partition still arrived: {seen:?}");
    // Rows of later rounds may still be on their way; all that arrives up
    // to the marker 500 is the attached partition's.
    sql("t_reattach", "INSERT INTO meas_low VALUES (99, 0); INSERT INTO meas VALUES (500, 0)").await;
    let mut rest = Vec::new();
    while !rest.contains(&500) {
        let mut events = Vec::new();
        tokio::time::timeout(std::time::Duration::from_secs(30), source.poll(&mut events))
            .await
            .unwrap_or_else(|_| panic!("the marker never arrived: {rest:?}"))
            .expect("poll");
        rest.extend(ids(&events));
    }
    assert_eq!(rest.last(), Some(&500), "nothing may follow the marker: {rest:?}");
    assert!(rest.iter().all(|id| (200..1000).contains(id)), "the detached partition still arrived: {rest:?}");
    let version: u32 = sql("t_reattach", "SHOW server_version_num").await.rows[0][0].clone().unwrap().parse().unwrap();
    if version >= 150_000 {
        assert_eq!(seen[..=first], [200], "from 15 on, pgoutput routes them afresh itself");
    }
}

fn ids(events: &[Event]) -> Vec<i64> {
    events.iter().map(|e| after_json(e)["id"].as_i64().expect("an id")).collect()
}
