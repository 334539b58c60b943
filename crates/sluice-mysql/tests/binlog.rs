//! The mysql source against a real MariaDB.

mod common;

use common::*;
use serde_json::json;
use sluice_core::{AckWatermark, Event, Op, Position, Source};
use sluice_mysql::MysqlSource;

fn after(event: &Event) -> serde_json::Value {
    serde_json::to_value(event).unwrap()["after"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_maps_to_faithful_json() {
    fresh(
        "m_types",
        "CREATE TABLE t (
            id bigint unsigned PRIMARY KEY, ti tinyint, uti tinyint unsigned, si smallint unsigned, mi mediumint, umi mediumint unsigned,
            i int, ui int unsigned, d decimal(30,10), f float, db double, b bit(10), e enum('small','large'), s set('x','y','z'),
            c char(3), vc varchar(20), tx text, bl blob, vb varbinary(8), js json,
            dt date, tm time(3), dtm datetime(6), ts timestamp(2) NULL, yr year, n int NULL)",
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    let mut source = started(config("m_types"), state.path(), None).await;
    sql(r#"INSERT INTO m_types.t VALUES (
        18446744073709551615, -128, 255, 65535, -8388608, 16777215,
        -2147483648, 4294967295, -12345678901234567890.0123456789, 0.1, 2.5e300, b'1000000001', 'large', 'x,z',
        'ab', 'héllo', 'long text', x'00ff', x'0102', '{"k": [1, null]}',
        '2026-02-28', '-838:59:58.500', '2026-02-28 13:14:15.123456', '2026-02-28 13:14:15.25', 2026, NULL)"#)
    .await;
    let events = collect(&mut source, 1).await;
    let expected = json!({
        "id": 18446744073709551615u64, "ti": -128, "uti": 255, "si": 65535, "mi": -8388608, "umi": 16777215,
        "i": -2147483648, "ui": 4294967295u64, "d": "-12345678901234567890.0123456789", "f": 0.1, "db": 2.5e300,
        "b": 513, "e": "large", "s": "x,z", "c": "ab", "vc": "héllo", "tx": "long text", "bl": "AP8=", "vb": "AQI=",
        "js": {"k": [1, null]}, "dt": "2026-02-28", "tm": "-838:59:58.500", "dtm": "2026-02-28T13:14:15.123456",
        "ts": "2026-02-28T13:14:15.25Z", "yr": 2026, "n": null
    });
    assert_eq!(after(&events[0]), expected);
    assert_eq!(&*events[0].table, "m_types.t");
    assert_eq!(events[0].key.as_ref().unwrap().values.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_table_transaction_is_one_transaction_and_rotation_is_followed() {
    fresh("m_tx", "CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY, v varchar(5));").await;
    let state = tempfile::tempdir().unwrap();
    let mut source = started(config("m_tx"), state.path(), None).await;
    sql("START TRANSACTION; INSERT INTO m_tx.a VALUES (1),(2),(3); INSERT INTO m_tx.b VALUES (1,'x'); UPDATE m_tx.a SET id = 4 WHERE id = 3; DELETE FROM m_tx.b; COMMIT;").await;
    sql("FLUSH BINARY LOGS").await;
    sql("INSERT INTO m_tx.a VALUES (9)").await;
    let events = collect(&mut source, 7).await;
    let ops: Vec<Op> = events.iter().map(|e| e.op).collect();
    assert_eq!(ops, [Op::Insert, Op::Insert, Op::Insert, Op::Insert, Op::Update, Op::Delete, Op::Insert]);
    assert!(events.windows(2).all(|w| w[0].position < w[1].position));
    let tx_ends: Vec<bool> = events.iter().map(|e| e.tx_end).collect();
    assert_eq!(tx_ends, [false, false, false, false, false, true, true]);
    let (Position::Mysql(first), Position::Mysql(last)) = (&events[0].position, &events[6].position) else { panic!() };
    assert!(events[..6].iter().all(|e| matches!(&e.position, Position::Mysql(p) if p.offset == first.offset)));
    assert!(last.file_index() > first.file_index(), "the insert after FLUSH BINARY LOGS is in the next file");
    assert_eq!(serde_json::to_value(&events[4]).unwrap()["before"], json!({"id": 3}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_from_before_an_alter_decodes_with_the_schema_of_its_time() {
    fresh("m_ddl", "CREATE TABLE t (id int PRIMARY KEY, a varchar(5))").await;
    let state = tempfile::tempdir().unwrap();
    let mut source = started(config("m_ddl"), state.path(), None).await;
    sql("INSERT INTO m_ddl.t VALUES (1, 'one')").await;
    sql("ALTER TABLE m_ddl.t ADD COLUMN b int").await;
    // The source reads a statement's schema when it reaches it: it must
    // reach this one before the table changes again (docs/mysql.md).
    let mut live = collect(&mut source, 2).await;
    sql("INSERT INTO m_ddl.t VALUES (2, 'two', 22)").await;
    sql("ALTER TABLE m_ddl.t DROP COLUMN a").await;
    sql("INSERT INTO m_ddl.t VALUES (3, 33)").await;
    live.extend(collect(&mut source, 3).await);
    let ops: Vec<Op> = live.iter().map(|e| e.op).collect();
    assert_eq!(ops, [Op::Insert, Op::Schema, Op::Insert, Op::Schema, Op::Insert]);
    assert_eq!(after(&live[0]), json!({"id": 1, "a": "one"}));
    assert_eq!(after(&live[2]), json!({"id": 2, "a": "two", "b": 22}));
    assert_eq!(after(&live[4]), json!({"id": 3, "b": 33}));
    assert_eq!(after(&live[1])["ddl"], "ALTER TABLE m_ddl.t ADD COLUMN b int");
    drop(source);
    // information_schema now only knows (id, b); the history knows better.
    let mut replay = started(config("m_ddl"), state.path(), Some(live[0].position.clone())).await;
    let again = collect(&mut replay, 5).await;
    for (original, replayed) in live.iter().zip(&again) {
        assert_eq!(serde_json::to_value(original).unwrap(), serde_json::to_value(replayed).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_by_gtid_rereads_the_checkpoint_transaction() {
    fresh("m_gtid", "CREATE TABLE t (id int PRIMARY KEY)").await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = config("m_gtid");
    cfg.gtid = true;
    let mut source = started(cfg.clone(), state.path(), None).await;
    sql("INSERT INTO m_gtid.t VALUES (1),(2)").await;
    sql("INSERT INTO m_gtid.t VALUES (3)").await;
    let events = collect(&mut source, 3).await;
    let Position::Mysql(pos) = &events[1].position else { panic!() };
    assert!(pos.gtid_before.is_some(), "MariaDB positions carry the GTID state before their transaction");
    drop(source);
    let mut again = started(cfg, state.path(), Some(events[1].position.clone())).await;
    let replay = collect(&mut again, 3).await;
    assert_eq!(
        replay.iter().map(|e| e.position.clone()).collect::<Vec<_>>(),
        events.iter().map(|e| e.position.clone()).collect::<Vec<_>>()
    );
    assert_eq!(replay[0].id(), events[0].id(), "a replay carries the same event ids");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_checkpoint_or_another_server_stops_with_the_fix() {
    fresh("m_purge", "CREATE TABLE t (id int PRIMARY KEY)").await;
    let state = tempfile::tempdir().unwrap();
    let mut source = started(config("m_purge"), state.path(), None).await;
    sql("INSERT INTO m_purge.t VALUES (1)").await;
    let events = collect(&mut source, 1).await;
    drop(source);
    let Position::Mysql(pos) = events[0].position.clone() else { panic!() };
    // Another server: same file names, different identity.
    std::fs::write(state.path().join("server_identity"), "mariadb server_id=1").unwrap();
    let mut other = MysqlSource::new(config("m_purge"), sluice_core::StateDir::files(state.path()));
    let err = other.start(Some(events[0].position.clone()), AckWatermark::default()).await.expect_err("must refuse");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("checkpoints were taken on \"mariadb server_id=1\""), "{err}");
    std::fs::remove_file(state.path().join("server_identity")).unwrap();
    // The checkpoint's binlog file purged while Sluice was stopped.
    let mut purged = pos.clone();
    purged.file = "mariadb-bin.000000".into();
    let mut gone = MysqlSource::new(config("m_purge"), sluice_core::StateDir::files(state.path()));
    let err = gone.start(Some(Position::Mysql(purged)), AckWatermark::default()).await.expect_err("must refuse");
    assert!(!err.is_transient());
    let message = err.to_string();
    assert!(
        message.contains("mariadb-bin.000000 is gone from the server (purged)")
            && message.contains("checkpoints reset"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_replication_rights_is_told_what_to_grant() {
    let state = tempfile::tempdir().unwrap();
    let mut cfg = config("m_rights");
    cfg.user = "sluice_noslave".into();
    let mut source = MysqlSource::new(cfg, sluice_core::StateDir::files(state.path()));
    let err = source.start(None, AckWatermark::default()).await.expect_err("must refuse");
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("REPLICATION"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_name_both_tables_and_kept_literals_are_the_statement_as_logged() {
    fresh("m_ddl_names", "CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE c (id int PRIMARY KEY)").await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = config("m_ddl_names");
    cfg.ddl_literals = sluice_config::DdlLiterals::Keep;
    let mut source = started(cfg, state.path(), None).await;
    sql("USE m_ddl_names; RENAME TABLE a TO b, c TO `d.x`").await;
    sql("USE m_ddl_names; CREATE VIEW v AS SELECT 'TABLE b' AS t").await;
    sql("ALTER TABLE m_ddl_names.b ADD COLUMN n varchar(9) DEFAULT 'kept'").await;
    sql("INSERT INTO m_ddl_names.b (id) VALUES (1)").await;
    let events = collect(&mut source, 6).await;
    let tables: Vec<(&str, Op)> = events.iter().map(|e| (&*e.table, e.op)).collect();
    assert_eq!(
        tables,
        [
            ("m_ddl_names.a", Op::Schema),
            ("m_ddl_names.b", Op::Schema),
            ("m_ddl_names.c", Op::Schema),
            ("m_ddl_names.d.x", Op::Schema),
            ("m_ddl_names.b", Op::Schema),
            ("m_ddl_names.b", Op::Insert),
        ]
    );
    assert_eq!(after(&events[4])["ddl"], "ALTER TABLE m_ddl_names.b ADD COLUMN n varchar(9) DEFAULT 'kept'");
    assert_eq!(after(&events[5]), json!({"id": 1, "n": "kept"}));
    // The schema history follows the rename: a restart before the insert
    // decodes it with b's columns of that time.
    drop(source);
    let mut again = started(config("m_ddl_names"), state.path(), Some(events[4].position.clone())).await;
    let replay = collect(&mut again, 2).await;
    assert_eq!(after(&replay[0])["ddl"], "ALTER TABLE m_ddl_names.b ADD COLUMN n varchar(9) DEFAULT '?'");
    assert_eq!(after(&replay[1]), json!({"id": 1, "n": "kept"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_length_binary_keeps_its_trailing_zero_bytes_in_snapshot_and_stream() {
    fresh(
        "m_binary",
        "CREATE TABLE t (id int PRIMARY KEY, b4 binary(4), b16 binary(16), vb varbinary(8)); \
         INSERT INTO t VALUES (1, x'01000000', x'00112233000000000000000000000000', x'0100')",
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    let mut cfg = config("m_binary");
    cfg.snapshot.mode = sluice_config::SnapshotMode::Initial;
    let mut source = started(cfg, state.path(), None).await;
    let snapshot = collect(&mut source, 1).await;
    assert_eq!(snapshot[0].op, Op::Read);
    sql("INSERT INTO m_binary.t VALUES (2, x'01000000', x'00112233000000000000000000000000', x'0100')").await;
    sql("INSERT INTO m_binary.t VALUES (3, x'00', x'ff', x'01')").await;
    sql("UPDATE m_binary.t SET b4 = x'02', b16 = x'0000000000000000000000000000000a' WHERE id = 1").await;
    let stream = collect(&mut source, 3).await;
    let hex = |event: &Event, image: &str, column: &str| -> String {
        let value = serde_json::to_value(event).unwrap()[image][column].as_str().unwrap().to_string();
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD.decode(value).unwrap();
        bytes.iter().map(|b| format!("{b:02X}")).collect()
    };
    let server = |id: i32| async move {
        let url = format!(
            "mysql://{}:{}@{}:{}/",
            env("SLUICE_TEST_MY_USER"),
            env("SLUICE_TEST_MY_PASSWORD"),
            env("SLUICE_TEST_MY_HOST"),
            env("SLUICE_TEST_MY_PORT")
        );
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        let row: (String, String, String) = mysql_async::prelude::Queryable::query_first(
            &mut conn,
            format!("SELECT HEX(b4), HEX(b16), HEX(vb) FROM m_binary.t WHERE id = {id}"),
        )
        .await
        .unwrap()
        .unwrap();
        conn.disconnect().await.unwrap();
        row
    };
    let columns =
        |event: &Event, image: &str| (hex(event, image, "b4"), hex(event, image, "b16"), hex(event, image, "vb"));
    let (s1, i2, i3, u1) = (&snapshot[0], &stream[0], &stream[1], &stream[2]);
    assert_eq!(columns(s1, "after"), ("01000000".into(), "00112233000000000000000000000000".into(), "0100".into()));
    assert_eq!(columns(i2, "after"), columns(s1, "after"), "the stream reads what the snapshot read");
    assert_eq!(columns(i2, "after"), server(2).await);
    assert_eq!(columns(i3, "after"), server(3).await, "VARBINARY x'01' stays one byte");
    assert_eq!(columns(i3, "after").2, "01");
    assert_eq!(columns(u1, "before"), columns(s1, "after"));
    assert_eq!(columns(u1, "after"), server(1).await);
    assert_eq!(columns(u1, "after").0, "02000000");
}
