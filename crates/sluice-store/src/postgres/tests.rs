//! The PostgreSQL store against the private server of
//! `scripts/services.sh`, each test in a schema of its own.

use std::time::Duration;

use sluice_core::settings::{Secret, SslMode};
use sluice_core::{CheckpointKey, CheckpointStore, Position, StoreError};
use sluice_pgwire::ConnectParams;

use super::{Lease, PgStore, PgStoreOptions, Taken};
use crate::Store;

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run `scripts/services.sh start` and source its env file"))
}

fn params(port: u16) -> ConnectParams {
    ConnectParams {
        host: env("SLUICE_TEST_PG_HOST"),
        port,
        database: "postgres".into(),
        user: env("SLUICE_TEST_PG_USER"),
        password: Secret::new(env("SLUICE_TEST_PG_PASSWORD")),
        ssl_mode: SslMode::Prefer,
        ca_file: None,
        connect_timeout: Duration::from_secs(5),
    }
}

fn options(schema: &str, hold: bool) -> PgStoreOptions {
    PgStoreOptions {
        params: params(env("SLUICE_TEST_PG_PORT").parse().unwrap()),
        schema: schema.into(),
        outage: Duration::from_secs(30),
        hold,
        instance: None,
    }
}

/// A store in a fresh schema.
fn fresh(schema: &str) -> PgStore {
    admin(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    PgStore::open(options(schema, true)).unwrap()
}

fn admin(sql: &str) -> sluice_pgwire::Rows {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = sluice_pgwire::Connection::connect(&params(env("SLUICE_TEST_PG_PORT").parse().unwrap()), false)
            .await
            .unwrap();
        conn.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
    })
}

#[test]
fn the_postgres_store_keeps_every_contract_and_persists() {
    {
        let store = fresh("store_contract");
        crate::tests::contract_of(&store);
        crate::tests::dead_letter_contract_of(&store);
        crate::tests::state_contract_of(&store.state());
    }
    let reopened = PgStore::open(options("store_contract", true)).unwrap();
    assert_eq!(reopened.list().unwrap().len(), 1);
    assert_eq!(reopened.generation("src").unwrap(), 2, "the generation is durable");
    assert_eq!(
        reopened.state().child("source").child("a").read("log").unwrap().as_deref(),
        Some(&b"first\nsecond\n"[..])
    );
}

#[test]
fn a_second_holder_is_refused_until_the_first_lets_go() {
    let first = fresh("store_held");
    let error = PgStore::open(options("store_held", true)).err().expect("a second holder must be refused");
    assert!(matches!(error, StoreError::InUse { .. }), "{error}");
    assert!(error.to_string().contains("another process"), "{error}");
    // A reader that does not hold the store is let in.
    assert!(PgStore::open(options("store_held", false)).is_ok());
    drop(first);
    // The server ends the first session once its socket closes.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match PgStore::open(options("store_held", true)) {
            Ok(_) => break,
            Err(StoreError::InUse { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_store_written_by_a_newer_sluice_is_refused() {
    drop(fresh("store_newer"));
    admin("UPDATE store_newer.store_version SET version = version + 1");
    let error = PgStore::open(options("store_newer", true)).err().expect("must be refused").to_string();
    assert!(error.contains("newer Sluice") && error.contains("store_newer"), "{error}");
}

#[test]
fn a_store_that_cannot_be_reached_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let error = PgStore::open(PgStoreOptions { params: params(port), ..options("store_gone", true) })
        .err()
        .expect("must fail")
        .to_string();
    assert!(error.contains(&format!("127.0.0.1:{port}")) && error.contains("cannot reach the store"), "{error}");
}

#[test]
fn a_cut_connection_is_replaced_and_the_call_completes() {
    let store = fresh("store_cut");
    let key = CheckpointKey::new("src", "a");
    let at = |tx| Position::Generator { tx, seq: 0 };
    store.commit(&[(key.clone(), at(1))]).unwrap();
    // Every session of the store's schema lock ends, as a server restart would end it.
    admin(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397511491 \
         AND objid = hashtext('store_cut')::oid",
    );
    store.commit(&[(key.clone(), at(2))]).unwrap();
    assert_eq!(store.load(&[key]).unwrap(), vec![Some(at(2))]);
}

/// An instance of a fleet on the store in `schema`.
fn instance(schema: &str, id: &str) -> PgStore {
    PgStore::open(PgStoreOptions { instance: Some(id.into()), ..options(schema, false) }).unwrap()
}

#[test]
fn a_lease_has_one_live_owner_and_a_stalled_one_is_fenced_off() {
    drop(fresh("store_lease"));
    let (a, b) = (instance("store_lease", "a"), instance("store_lease", "b"));
    let long = Duration::from_secs(60);
    let Taken::Lease(first) = a.try_acquire("p", "a", "cfg", Duration::from_millis(300)).unwrap() else {
        panic!("a free lease")
    };
    assert_eq!(first.epoch, 1);
    assert_eq!(b.try_acquire("p", "b", "cfg", long).unwrap(), Taken::Held, "a live lease is not taken");
    let key = CheckpointKey::new("src", "k");
    let at = |tx| Position::Generator { tx, seq: 0 };
    a.fenced(first.clone()).commit(&[(key.clone(), at(1))]).unwrap();

    // `a` stalls past its lease (it does not renew); `b` takes over.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let second = loop {
        if let Taken::Lease(lease) = b.try_acquire("p", "b", "cfg", long).unwrap() {
            break lease;
        }
        assert!(std::time::Instant::now() < deadline, "the expired lease was never taken");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(second.epoch, 2, "every acquisition moves the epoch on");
    // `a` wakes up: it can neither renew nor move the checkpoint.
    assert!(!a.renew(&first, "a", long).unwrap());
    let error = a.fenced(first).commit(&[(key.clone(), at(5))]).unwrap_err();
    assert!(matches!(error, StoreError::Fenced { held: 1, current: 2, .. }), "{error}");
    assert_eq!(a.load(std::slice::from_ref(&key)).unwrap(), vec![Some(at(1))], "the fenced commit wrote nothing");
    b.fenced(second.clone()).commit(&[(key.clone(), at(5))]).unwrap();
    assert!(b.renew(&second, "b", long).unwrap());
    let rows = b.leases().unwrap();
    assert_eq!((rows[0].owner.as_str(), rows[0].epoch, rows[0].live), ("b", 2, true), "{rows:?}");

    // Given back, it is free at once.
    b.release(&second, "b").unwrap();
    assert!(matches!(a.try_acquire("p", "a", "cfg", long).unwrap(), Taken::Lease(Lease { epoch: 3, .. })));
}

#[test]
fn a_killed_owners_leases_are_free_at_once_and_another_config_is_told_apart() {
    drop(fresh("store_lease_gone"));
    let long = Duration::from_secs(600);
    let a = instance("store_lease_gone", "a");
    let b = instance("store_lease_gone", "b");
    assert!(matches!(a.try_acquire("p", "a", "one", long).unwrap(), Taken::Lease(_)));
    assert_eq!(b.try_acquire("p", "b", "two", long).unwrap(), Taken::OtherConfig { owner: "a".into() });
    assert_eq!(b.try_acquire("p", "b", "one", long).unwrap(), Taken::Held);
    // The owner's session ends (a kill -9 ends it the same way): its
    // lease is free long before it expires.
    drop(a);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Taken::Lease(lease) = b.try_acquire("p", "b", "two", long).unwrap() {
            assert_eq!(lease.epoch, 2, "a dead owner's lease goes to another config too");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the dead owner's lease was never freed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let taken = PgStore::open(PgStoreOptions { instance: Some("b".into()), ..options("store_lease_gone", false) });
    assert!(taken.err().unwrap().to_string().contains("instance id \"b\" is in use"));
}

#[test]
fn a_lone_run_and_a_fleet_do_not_share_a_store() {
    drop(fresh("store_kinds"));
    let lone = PgStore::open(options("store_kinds", true)).unwrap();
    let member = PgStore::open(PgStoreOptions { instance: Some("m".into()), ..options("store_kinds", false) });
    assert!(matches!(member.err(), Some(StoreError::InUse { .. })), "a fleet member joined a store a lone run holds");
    drop(lone);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let first = loop {
        match PgStore::open(PgStoreOptions { instance: Some("m".into()), ..options("store_kinds", false) }) {
            Ok(store) => break store,
            Err(StoreError::InUse { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("{e}"),
        }
    };
    // Members share it; a lone run is refused while any is there.
    let second = PgStore::open(PgStoreOptions { instance: Some("n".into()), ..options("store_kinds", false) }).unwrap();
    assert!(matches!(PgStore::open(options("store_kinds", true)).err(), Some(StoreError::InUse { .. })));
    drop((first, second));
}
