//! The postgres source against a real PostgreSQL.

mod common;

use common::*;
use serde_json::json;
use sluice_core::{AckWatermark, Op, Position, Source};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_supported_type_maps_to_faithful_json() {
    fresh_database("t_types").await;
    sql(
        "t_types",
        "CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE DOMAIN positive AS integer CHECK (VALUE > 0);
         CREATE TABLE everything (
            id bigint PRIMARY KEY, small smallint, regular integer, num numeric(30,10), real_ real, dbl double precision,
            flag boolean, txt text, vc varchar(10), ch char(3), js json, jsb jsonb, uid uuid, bin bytea,
            d date, t time, ttz timetz, ts timestamp, tstz timestamptz, iv interval,
            ints integer[], texts text[], nums numeric[], feeling mood, feelings mood[], pos positive, odd point)",
    )
    .await;
    let mut source = started(config("t_types", "types"), None, AckWatermark::default()).await;
    sql(
        "t_types",
        r#"INSERT INTO everything VALUES (
            9007199254740993, -32768, 2147483647, 12345678901234567890.0123456789, 1.5, 'NaN',
            true, 'héllo "q"', 'short', 'ab', '{"a": 1}', '{"b": [true, null]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\x00ff',
            '2026-02-28', '13:14:15.5', '13:14:15+02', '2026-02-28 13:14:15.123456', '2026-02-28 13:14:15.5+02', '1 year 2 mons 3 days 04:05:06',
            '{1,NULL,3}', '{"a b","c,d"}', '{1.50,NaN}', 'happy', '{sad,happy}', 7, '(1,2)')"#,
    )
    .await;
    let events = collect(&mut source, 1).await;
    let expected = json!({
        "id": 9007199254740993u64, "small": -32768, "regular": 2147483647,
        "num": "12345678901234567890.0123456789", "real_": 1.5, "dbl": "NaN",
        "flag": true, "txt": "héllo \"q\"", "vc": "short", "ch": "ab ", "js": {"a": 1}, "jsb": {"b": [true, null]},
        "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "bin": "AP8=",
        "d": "2026-02-28", "t": "13:14:15.5", "ttz": "13:14:15+02", "ts": "2026-02-28T13:14:15.123456",
        "tstz": "2026-02-28T11:14:15.5Z", "iv": "P1Y2M3DT4H5M6S",
        "ints": [1, null, 3], "texts": ["a b", "c,d"], "nums": ["1.50", "NaN"],
        "feeling": "happy", "feelings": ["sad", "happy"], "pos": 7, "odd": "(1,2)"
    });
    assert_eq!(after_json(&events[0]), expected);
    assert_eq!(&*events[0].table, "public.everything");
    assert_eq!(&*events[0].database, "t_types");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_follow_replica_identity_and_keep_unchanged_toast_apart() {
    fresh_database("t_changes").await;
    sql(
        "t_changes",
        "CREATE TABLE d (id int PRIMARY KEY, note text, big text);
         ALTER TABLE d ALTER COLUMN big SET STORAGE EXTERNAL;
         CREATE TABLE f (id int PRIMARY KEY, note text);
         ALTER TABLE f REPLICA IDENTITY FULL;",
    )
    .await;
    let mut source = started(config("t_changes", "changes"), None, AckWatermark::default()).await;
    sql(
        "t_changes",
        "INSERT INTO d VALUES (1, 'a', repeat('x', 10000));
         UPDATE d SET note = 'b' WHERE id = 1;
         UPDATE d SET id = 2 WHERE id = 1;
         DELETE FROM d WHERE id = 2;
         INSERT INTO f VALUES (1, 'a');
         UPDATE f SET note = 'b';
         DELETE FROM f;
         TRUNCATE d;",
    )
    .await;
    let events = collect(&mut source, 8).await;
    let ops: Vec<Op> = events.iter().map(|e| e.op).collect();
    use Op::*;
    assert_eq!(ops, [Insert, Update, Update, Delete, Insert, Update, Delete, Truncate]);
    let json: Vec<serde_json::Value> = events.iter().map(|e| serde_json::to_value(e).unwrap()).collect();
    // An unchanged TOAST value is left out and listed apart, never a null.
    assert_eq!(json[1]["after"], json!({"id": 1, "note": "b"}));
    assert_eq!(json[1]["unchanged"], json!(["big"]));
    assert_eq!(json[1]["before"], serde_json::Value::Null, "DEFAULT identity sends no old row without a key change");
    assert_eq!(json[2]["before"], json!({"id": 1}), "a key change sends the old key");
    assert_eq!(json[2]["key"], json!({"id": 2}));
    assert_eq!(json[3]["before"], json!({"id": 2}));
    assert_eq!(json[5]["before"], json!({"id": 1, "note": "a"}), "FULL identity sends the whole old row");
    assert_eq!(json[6]["before"], json!({"id": 1, "note": "b"}));
    assert_eq!(json[7]["table"], "public.d");
    // One transaction: one commit LSN, sequence numbers in order, tx_end on the last.
    assert!(events.windows(2).all(|w| w[0].position < w[1].position));
    let Position::Postgres { commit_lsn, .. } = events[0].position else { panic!() };
    assert!(events.iter().all(|e| matches!(e.position, Position::Postgres { commit_lsn: c, .. } if c == commit_lsn)));
    assert_eq!(events.iter().filter(|e| e.tx_end).count(), 1);
    assert!(events[7].tx_end);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_schema_changes_are_events() {
    fresh_database("t_messages").await;
    sql("t_messages", "CREATE TABLE s (id int PRIMARY KEY)").await;
    let mut cfg = config("t_messages", "messages");
    cfg.messages = Some(true);
    if server_version().await < 140_000 {
        let mut source = sluice_postgres::PostgresSource::new(cfg);
        let err = source.start(None, AckWatermark::default()).await.expect_err("messages refused before 14");
        assert!(err.to_string().contains("messages: true needs PostgreSQL 14"), "{err}");
        assert!(!err.is_transient());
        return;
    }
    let mut source = started(cfg, None, AckWatermark::default()).await;
    sql("t_messages", "INSERT INTO s VALUES (1)").await;
    sql("t_messages", "SELECT pg_logical_emit_message(false, 'audit', 'outside')").await;
    sql(
        "t_messages",
        "BEGIN; SELECT pg_logical_emit_message(true, 'outbox', '{\"order\": 1}'); ALTER TABLE s ADD COLUMN note text; INSERT INTO s VALUES (2, 'x'); COMMIT;",
    )
    .await;
    let events = collect(&mut source, 4).await;
    assert_eq!(events[1].op, Op::Message);
    assert_eq!(after_json(&events[1]), json!({"prefix": "audit", "content": "outside", "transactional": false}));
    assert_eq!(events[2].op, Op::Message);
    assert_eq!(&*events[2].table, "outbox");
    assert_eq!(after_json(&events[3]), json!({"id": 2, "note": "x"}));
    assert_ne!(events[0].schema_version, events[3].schema_version, "the new column changes the schema version");
    assert!(events.windows(2).all(|w| w[0].position < w[1].position));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_advances_only_to_what_every_sink_checkpointed() {
    fresh_database("t_ack").await;
    sql("t_ack", "CREATE TABLE a (id int PRIMARY KEY)").await;
    let acked = AckWatermark::default();
    let cfg = config("t_ack", "ack");
    let slot = cfg.slot_name();
    let mut source = started(cfg.clone(), None, acked.clone()).await;
    let initial = wait_for_slot("t_ack", &slot, "slot exists", |_| true).await;
    sql("t_ack", "INSERT INTO a VALUES (1)").await;
    sql("t_ack", "INSERT INTO a VALUES (2)").await;
    let events = collect(&mut source, 2).await;
    let Position::Postgres { commit_lsn: second, .. } = events[1].position else { panic!() };
    let stats = source.stats();
    assert_eq!(stats.events_read.load(std::sync::atomic::Ordering::Relaxed), 2);
    assert!(stats.bytes_read.load(std::sync::atomic::Ordering::Relaxed) > 0);
    // Nothing is checkpointed yet: after several status updates the slot has not moved.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let held = wait_for_slot("t_ack", &slot, "slot unchanged", |_| true).await;
    assert_eq!(held, initial, "the slot moved before any sink checkpointed");
    // The first event is checkpointed: the slot moves to its commit LSN, not past the second.
    acked.advance(&events[0].position);
    let Position::Postgres { commit_lsn: first, .. } = events[0].position else { panic!() };
    let moved = wait_for_slot("t_ack", &slot, "first commit", |lsn| lsn >= first.0).await;
    assert!(moved < second.0, "flushed {moved:X} past the unacknowledged {second}");
    // Everything checkpointed and the stream idle: the slot catches up past the last commit.
    acked.advance(&events[1].position);
    wait_for_slot("t_ack", &slot, "idle catch-up", |lsn| lsn > second.0).await;

    // A restart from the first checkpoint re-reads from its transaction on.
    drop(source);
    let mut again = started(cfg, Some(events[0].position.clone()), AckWatermark::default()).await;
    sql("t_ack", "INSERT INTO a VALUES (3)").await;
    let replay = collect(&mut again, 1).await;
    assert_eq!(after_json(&replay[0]), json!({"id": 3}), "the slot had moved past both, so only new rows come");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_problems_are_named_with_a_fix() {
    fresh_database("t_errors").await;
    sql("t_errors", "CREATE TABLE one (id int PRIMARY KEY); CREATE TABLE two (id int PRIMARY KEY); CREATE PUBLICATION partial FOR TABLE one;").await;
    let start = |cfg| async move {
        let mut source = sluice_postgres::PostgresSource::new(cfg);
        source.start(None, AckWatermark::default()).await.expect_err("start must fail")
    };
    let mut cfg = config("t_errors", "errors");
    cfg.create_slot = false;
    let err = start(cfg.clone()).await;
    assert!(!err.is_transient());
    assert!(err.to_string().contains("replication slot \"sluice_errors\" does not exist"), "{err}");
    assert!(err.to_string().contains("pg_create_logical_replication_slot('sluice_errors', 'pgoutput')"), "{err}");

    let mut partial = config("t_errors", "errors");
    partial.publication = Some("partial".into());
    partial.create_publication = false;
    let err = start(partial).await.to_string();
    assert!(err.contains("does not cover \"public\".\"two\"") && err.contains("ALTER PUBLICATION"), "{err}");

    let mut missing = config("t_errors", "errors");
    missing.publication = Some("nothing_here".into());
    missing.create_publication = false;
    let err = start(missing).await.to_string();
    assert!(err.contains("publication \"nothing_here\" does not exist"), "{err}");

    let mut no_table = config("t_errors", "errors");
    no_table.tables = vec!["sales.*".into()];
    let err = start(no_table).await.to_string();
    assert!(err.contains("no table matches"), "{err}");

    let mut norepl = config("t_errors", "errors");
    norepl.user = "sluice_norepl".into();
    let err = start(norepl).await.to_string();
    assert!(err.contains("lacks the REPLICATION attribute") && err.contains("ALTER ROLE"), "{err}");

    let mut bad_password = config("t_errors", "errors");
    bad_password.password = sluice_config::Secret::new("wrong");
    let err = start(bad_password).await;
    assert!(!err.is_transient());
    assert!(err.to_string().contains("28P01") && !err.to_string().contains("wrong"), "{err}");

    // Checkpoints exist but the slot is gone: changes were lost, so say so.
    let mut source = sluice_postgres::PostgresSource::new(config("t_errors", "errors"));
    let checkpoint = Position::Postgres { commit_lsn: sluice_core::Lsn(1), seq: 0 };
    let err =
        source.start(Some(checkpoint), AckWatermark::default()).await.expect_err("a lost slot must stop the source");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("the slot was dropped") && err.to_string().contains("checkpoints reset"), "{err}");

    let mut nobody_home = config("t_errors", "errors");
    nobody_home.port = 1;
    assert!(start(nobody_home).await.is_transient(), "an unreachable server is worth retrying");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_moves_an_idle_slot_forward() {
    fresh_database("t_heartbeat").await;
    sql("t_heartbeat", "CREATE TABLE quiet (id int PRIMARY KEY)").await;
    let mut cfg = config("t_heartbeat", "heartbeat");
    cfg.heartbeat_secs = Some(1);
    if server_version().await < 140_000 {
        let mut source = sluice_postgres::PostgresSource::new(cfg);
        let err = source.start(None, AckWatermark::default()).await.expect_err("heartbeats refused before 14");
        assert!(err.to_string().contains("heartbeat_secs needs PostgreSQL 14"), "{err}");
        return;
    }
    let slot = cfg.slot_name();
    let source = started(cfg, None, AckWatermark::default()).await;
    let first = wait_for_slot("t_heartbeat", &slot, "slot exists", |_| true).await;
    // No change to any watched table, yet the slot moves: each heartbeat,
    // once received, proves every earlier commit was sent.
    let second = wait_for_slot("t_heartbeat", &slot, "a first heartbeat", |lsn| lsn > first).await;
    wait_for_slot("t_heartbeat", &slot, "a later heartbeat", |lsn| lsn > second).await;
    assert!(source.stats().heartbeats_sent.load(std::sync::atomic::Ordering::Relaxed) >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_logical_wal_is_refused_with_the_fix() {
    let mut cfg = config("postgres", "walcheck");
    cfg.port = env("SLUICE_TEST_PG_REPLICA_LEVEL_PORT").parse().unwrap();
    cfg.ssl_mode = sluice_config::SslMode::Disable;
    cfg.ca_file = None;
    let mut source = sluice_postgres::PostgresSource::new(cfg);
    let err = source.start(None, AckWatermark::default()).await.expect_err("wal_level replica must be refused");
    assert!(!err.is_transient());
    let message = err.to_string();
    assert!(message.contains("wal_level is \"replica\"") && message.contains("wal_level = logical"), "{message}");
}

/// The server drops a replication client that stays silent past
/// wal_sender_timeout. With slow sinks the reader stops reading, but its
/// status updates must keep going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_updates_keep_the_connection_alive_while_sinks_are_slow() {
    fresh_database("t_slow").await;
    sql("t_slow", "CREATE TABLE s (id int PRIMARY KEY)").await;
    sql("postgres", "DROP ROLE IF EXISTS sluice_short_timeout").await;
    let password = env("SLUICE_TEST_PG_PASSWORD");
    sql(
        "postgres",
        &format!(
            "CREATE ROLE sluice_short_timeout LOGIN SUPERUSER REPLICATION PASSWORD '{password}';
             ALTER ROLE sluice_short_timeout SET wal_sender_timeout = '2s'"
        ),
    )
    .await;
    let mut cfg = config("t_slow", "slow");
    cfg.user = "sluice_short_timeout".into();
    cfg.status_interval_secs = 1;
    let mut source = started(cfg, None, AckWatermark::default()).await;
    // Enough rows to fill the reader's queue, so it stops reading.
    sql("t_slow", "INSERT INTO s SELECT generate_series(1, 20000)").await;
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let events = collect(&mut source, 20_000).await;
    assert!(events.last().unwrap().tx_end);
    let walsenders =
        sql("postgres", "SELECT count(*) AS n FROM pg_stat_replication WHERE usename = 'sluice_short_timeout'").await;
    assert_eq!(walsenders.first("n"), Some("1"), "the replication connection survived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_change_is_an_event_with_the_new_columns_and_a_replay_repeats_it() {
    fresh_database("t_ddl").await;
    sql("t_ddl", "CREATE TABLE c (id int PRIMARY KEY, name text, age int, note varchar(10))").await;
    let state = tempfile::tempdir().unwrap();
    let source = || {
        sluice_postgres::PostgresSource::new(config("t_ddl", "ddl"))
            .with_state_dir(sluice_core::StateDir::files(state.path()))
    };
    let mut first = source();
    first.start(None, AckWatermark::default()).await.expect("source starts");
    sql("t_ddl", "INSERT INTO c VALUES (1, 'a', 30, 'n')").await;
    sql(
        "t_ddl",
        "ALTER TABLE c RENAME name TO full_name; ALTER TABLE c ALTER note TYPE varchar(20); \
         ALTER TABLE c DROP age; ALTER TABLE c ADD extra bigint NOT NULL DEFAULT 0; \
         INSERT INTO c VALUES (2, 'b', 'm', 7); UPDATE c SET note = 'o' WHERE id = 1",
    )
    .await;
    let events = collect(&mut first, 4).await;
    drop(first);
    let ops: Vec<Op> = events.iter().map(|e| e.op).collect();
    assert_eq!(ops, [Op::Insert, Op::Schema, Op::Insert, Op::Update], "one event for the changes between rows");
    assert!(events.windows(2).all(|w| w[0].position < w[1].position));
    let change = &events[1];
    assert_eq!(&*change.table, "public.c");
    let column = |name: &str, ty: &str, nullable: bool, key: bool| json!({"name": name, "type": ty, "nullable": nullable, "key": key});
    assert_eq!(
        after_json(change),
        json!({
            "database": "t_ddl",
            "ddl": null,
            "columns": [
                column("id", "int4", false, true),
                column("full_name", "text", true, false),
                column("note", "varchar(20)", true, false),
                column("extra", "int8", false, false),
            ],
            "changes": [
                {"change": "retyped", "column": "note", "from": "varchar(10)", "to": "varchar(20)"},
                {"change": "renamed", "column": "full_name", "from": "name"},
                {"change": "dropped", "column": "age"},
                {"change": "added", "column": "extra"},
            ],
        })
    );
    // Nothing was acknowledged: a new start reads it all again, and the
    // history makes the replayed schema change the same event, at the
    // same place, while the session's first Relation message is none.
    let mut again = source();
    again.start(None, AckWatermark::default()).await.expect("source starts again");
    let replayed = collect(&mut again, 4).await;
    drop(again);
    assert_eq!(replayed, events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_rows_come_one_by_one_and_a_later_error_ends_them() {
    let mut conn = sluice_postgres::wire::Connection::connect(&params("postgres"), false).await.unwrap();
    // Rows for 1 and 2 go out before the division by zero at 3.
    let mut rows = conn.query_rows("SELECT 10 / (3 - g) FROM generate_series(1, 5) g").await.unwrap();
    let mut seen = Vec::new();
    let error = loop {
        match rows.next().await {
            Ok(Some(row)) => seen.push(row[0].clone().unwrap()),
            Ok(None) => panic!("the query ended without its error after {seen:?}"),
            Err(e) => break e,
        }
    };
    assert_eq!(seen, ["5", "10"]);
    assert_eq!(error.code(), Some("22012"), "{error}");
    let after = conn.simple_query("SELECT 'still usable' AS x").await.unwrap();
    assert_eq!(after.first("x"), Some("still usable"));
}
