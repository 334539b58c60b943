//! Helpers for tests against the private MariaDB that
//! `scripts/services.sh start` runs; its env file must be sourced.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use sluice_config::{MysqlConfig, MysqlSslMode, MysqlStart, Secret};
use sluice_core::{AckWatermark, Event, Position, Source};
use sluice_mysql::MysqlSource;

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `scripts/services.sh start` and source the env file it prints (scripts/test.sh does both)")
    })
}

pub async fn sql(statements: &str) {
    let url = format!(
        "mysql://{}:{}@{}:{}/",
        env("SLUICE_TEST_MY_USER"),
        env("SLUICE_TEST_MY_PASSWORD"),
        env("SLUICE_TEST_MY_HOST"),
        env("SLUICE_TEST_MY_PORT")
    );
    let mut conn = mysql_async::Conn::from_url(url).await.expect("test connection");
    conn.query_drop(statements).await.unwrap_or_else(|e| panic!("{statements}: {e}"));
    conn.disconnect().await.unwrap();
}

pub fn config(database: &str) -> MysqlConfig {
    MysqlConfig {
        id: database.into(),
        host: env("SLUICE_TEST_MY_HOST"),
        port: env("SLUICE_TEST_MY_PORT").parse().unwrap(),
        user: env("SLUICE_TEST_MY_USER"),
        password: Secret::new(env("SLUICE_TEST_MY_PASSWORD")),
        ssl_mode: MysqlSslMode::Disable,
        ca_file: None,
        tables: vec![format!("{database}.*")],
        server_id: None,
        gtid: false,
        start: MysqlStart::Current,
        heartbeat_secs: 1,
        connect_timeout_secs: 10,
        snapshot: Default::default(),
        signal_table: None,
        ddl_literals: sluice_config::DEFAULT_DDL_LITERALS,
    }
}

pub async fn fresh(database: &str, ddl: &str) {
    sql(&format!("DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database}; USE {database}; {ddl}")).await;
}

pub async fn started(config: MysqlConfig, state: &Path, from: Option<Position>) -> MysqlSource {
    let mut source = MysqlSource::new(config, sluice_core::StateDir::files(state));
    source.start(from, AckWatermark::default()).await.expect("source starts");
    source
}

pub async fn collect(source: &mut MysqlSource, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    while events.len() < count {
        tokio::time::timeout(Duration::from_secs(30), source.poll(&mut events))
            .await
            .unwrap_or_else(|_| panic!("timed out with {} of {count} events", events.len()))
            .expect("poll");
    }
    assert_eq!(events.len(), count, "more events than expected");
    events
}
