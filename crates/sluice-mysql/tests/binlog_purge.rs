//! PURGE BINARY LOGS past a checkpoint, in a test binary of its own: the
//! server does not purge a file another reader still streams, and tests
//! in one binary run side by side.

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::Queryable;
use sluice_core::{AckWatermark, Position, Source};
use sluice_mysql::MysqlSource;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_binary_logs_past_the_checkpoint_is_reported() {
    // Runs alone in its own database; PURGE only removes files older than
    // the current one, and every other test starts from "current".
    fresh("m_purge2", "CREATE TABLE t (id int PRIMARY KEY)").await;
    let state = tempfile::tempdir().unwrap();
    let mut source = started(config("m_purge2"), state.path(), None).await;
    sql("INSERT INTO m_purge2.t VALUES (1)").await;
    let events = collect(&mut source, 1).await;
    drop(source);
    let Position::Mysql(pos) = &events[0].position else { panic!() };
    // The server will not purge a file a dump thread still reads; wait for
    // the stopped source's thread to go.
    let url = format!(
        "mysql://{}:{}@{}:{}/",
        env("SLUICE_TEST_MY_USER"),
        env("SLUICE_TEST_MY_PASSWORD"),
        env("SLUICE_TEST_MY_HOST"),
        env("SLUICE_TEST_MY_PORT")
    );
    let mut admin = mysql_async::Conn::from_url(url).await.unwrap();
    let started = std::time::Instant::now();
    loop {
        let dumps: Option<u64> = admin
            .query_first("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
            .await
            .unwrap();
        if dumps == Some(0) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "binlog dump threads did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sql("FLUSH BINARY LOGS").await;
    let url_current: String = {
        let url = format!(
            "mysql://{}:{}@{}:{}/",
            env("SLUICE_TEST_MY_USER"),
            env("SLUICE_TEST_MY_PASSWORD"),
            env("SLUICE_TEST_MY_HOST"),
            env("SLUICE_TEST_MY_PORT")
        );
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        let row: Option<mysql_async::Row> = conn.query_first("SHOW MASTER STATUS").await.unwrap();
        row.unwrap().get(0).unwrap()
    };
    sql(&format!("PURGE BINARY LOGS TO '{url_current}'")).await;
    let logs: Vec<String> = {
        let url = format!(
            "mysql://{}:{}@{}:{}/",
            env("SLUICE_TEST_MY_USER"),
            env("SLUICE_TEST_MY_PASSWORD"),
            env("SLUICE_TEST_MY_HOST"),
            env("SLUICE_TEST_MY_PORT")
        );
        let mut conn = mysql_async::Conn::from_url(url).await.unwrap();
        conn.query_map("SHOW BINARY LOGS", |row: mysql_async::Row| row.get::<String, usize>(0).unwrap()).await.unwrap()
    };
    assert!(!logs.iter().any(|l| *l == *pos.file), "PURGE kept {} ({logs:?})", pos.file);
    let mut gone = MysqlSource::new(config("m_purge2"), sluice_core::StateDir::files(state.path()));
    let err = gone.start(Some(events[0].position.clone()), AckWatermark::default()).await.expect_err("must refuse");
    assert!(err.to_string().contains(&format!("{} is gone from the server (purged)", pos.file)), "{err}");
}
