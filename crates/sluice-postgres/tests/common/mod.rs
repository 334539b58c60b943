//! Helpers for tests against the private PostgreSQL that
//! `scripts/services.sh start` runs; its env file must be sourced.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use sluice_config::{PostgresConfig, Secret, SslMode};
use sluice_core::{AckWatermark, Event, Position, Source};
use sluice_postgres::PostgresSource;
use sluice_postgres::wire::{ConnectParams, Connection, Rows};

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `scripts/services.sh start` and source the env file it prints (scripts/test.sh does both)")
    })
}

pub fn params(database: &str) -> ConnectParams {
    ConnectParams {
        host: env("SLUICE_TEST_PG_HOST"),
        port: env("SLUICE_TEST_PG_PORT").parse().unwrap(),
        database: database.into(),
        user: env("SLUICE_TEST_PG_USER"),
        password: Secret::new(env("SLUICE_TEST_PG_PASSWORD")),
        ssl_mode: SslMode::Prefer,
        ca_file: None,
        connect_timeout: Duration::from_secs(10),
    }
}

pub async fn sql(database: &str, statements: &str) -> Rows {
    let mut conn = Connection::connect(&params(database), false).await.expect("test connection");
    let rows = conn.simple_query(statements).await.unwrap_or_else(|e| panic!("{statements}: {e}"));
    conn.close().await;
    rows
}

/// A new, empty database; its old slots go with it.
pub async fn fresh_database(name: &str) {
    sql(
        "postgres",
        &format!("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '{name}'"),
    )
    .await;
    sql("postgres", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
    sql("postgres", &format!("CREATE DATABASE {name}")).await;
}

pub fn config(database: &str, id: &str) -> PostgresConfig {
    let p = params(database);
    PostgresConfig {
        snapshot: Default::default(),
        id: id.into(),
        host: p.host,
        port: p.port,
        database: database.into(),
        user: p.user,
        password: p.password,
        ssl_mode: SslMode::VerifyFull,
        ca_file: Some(PathBuf::from(env("SLUICE_TEST_PG_CA"))),
        slot: None,
        publication: None,
        create_slot: true,
        create_publication: true,
        tables: vec!["public.*".into()],
        keyless_tables: Default::default(),
        messages: None,
        heartbeat_secs: None,
        status_interval_secs: 1,
        connect_timeout_secs: 10,
        failover_hosts: Vec::new(),
        failover_slot: None,
    }
}

pub async fn started(config: PostgresConfig, from: Option<Position>, acked: AckWatermark) -> PostgresSource {
    let mut source = PostgresSource::new(config);
    source.start(from, acked).await.expect("source starts");
    source
}

/// Polls until `events` holds at least `count`; panics after 30 s
/// without a poll's answer.
pub async fn poll_until(source: &mut PostgresSource, events: &mut Vec<Event>, count: usize) {
    while events.len() < count {
        tokio::time::timeout(Duration::from_secs(30), source.poll(events))
            .await
            .unwrap_or_else(|_| panic!("timed out with {} of {count} events", events.len()))
            .expect("poll");
    }
}

/// Polls until `count` events arrived, and no more; panics after 30 s.
pub async fn collect(source: &mut PostgresSource, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    poll_until(source, &mut events, count).await;
    assert_eq!(events.len(), count, "more events than expected: {events:#?}");
    events
}

pub fn after_json(event: &Event) -> serde_json::Value {
    serde_json::to_value(event).unwrap()["after"].clone()
}

/// Polls the server until the slot's confirmed flush position satisfies `check`.
pub async fn wait_for_slot(database: &str, slot: &str, what: &str, check: impl Fn(u64) -> bool) -> u64 {
    let start = std::time::Instant::now();
    loop {
        let rows =
            sql(database, &format!("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"))
                .await;
        let lsn: sluice_core::Lsn = rows.first("confirmed_flush_lsn").unwrap().parse().unwrap();
        if check(lsn.0) {
            return lsn.0;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for the slot: {what} (at {lsn})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The server's `server_version_num` (130023 for 13.23): tests of features
/// a major lacks check that it is refused there instead.
pub async fn server_version() -> u32 {
    let rows = sql("postgres", "SHOW server_version_num").await;
    rows.first("server_version_num").and_then(|v| v.parse().ok()).expect("server_version_num")
}
