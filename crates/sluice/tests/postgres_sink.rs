//! The postgres sink against the test PostgreSQL: a second database is
//! the target. Each test compares the target with the source row by row
//! through the server's own `to_jsonb`, never with expectations written
//! by hand.

mod common;

use std::time::Duration;

use common::pg::{drop_slots, fresh_database, prepare_replication, sql, stop};
use common::pgsink::{pipeline, scalar, sink, table_json};
use common::*;

/// Types of every family the sink maps, values at their edges, and a
/// TOASTed column that updates leave unchanged.
const ZOO: &str = "CREATE TYPE mood AS ENUM ('calm', 'wild');
CREATE TABLE zoo (id int PRIMARY KEY, s smallint, big bigint, flag boolean, r real, d double precision,
  amount numeric(12,2), free numeric, code char(3), name varchar(20), note text, raw bytea, doc json, docb jsonb,
  token uuid, born date, at_time time(3), at_tz timetz, seen timestamp(3), stamped timestamptz, span interval,
  feeling mood, ints int[], words text[], addr inet, cash money, bits bit(4), vbits varbit(8), page xml, big_text text);
CREATE TABLE lines (account int, line int, amount bigint NOT NULL, PRIMARY KEY (account, line));
CREATE TABLE scratch (id int PRIMARY KEY, v text)";

const WORKLOAD: &str = "INSERT INTO zoo SELECT g, g - 100, g * 9007199254740, g % 2 = 0, g / 3.0, 1e300 / g, g * 10.25,
  g * 1.000001, 'c' || g % 10, 'name \"' || g || E'\\t''', E'line\\nbreak \\\\ ' || g, decode('00ff' || lpad(to_hex(g), 4, '0'), 'hex'),
  '{\"b\": 1, \"a\": [1, 2]}', jsonb_build_object('k', g, 'nested', jsonb_build_object('x', NULL)),
  md5(g::text)::uuid, DATE '2024-02-29' + g, TIME '13:45:56.123' + g * INTERVAL '1 second', TIMETZ '10:00:00+02',
  TIMESTAMP '1999-12-31 23:59:59.999' + g * INTERVAL '1 day', TIMESTAMPTZ '2026-12-02 10:00:00.123456+00' + g * INTERVAL '1 hour',
  g * INTERVAL '1 day 2 hours 3.5 seconds', CASE WHEN g % 2 = 0 THEN 'calm' ELSE 'wild' END::mood,
  ARRAY[g, NULL, -g], ARRAY['a,b', 'c\"d', NULL, ''], ('192.168.0.' || g)::inet, g * 1.5, B'1010', B'101',
  ('<a b=\"' || g || '\"/>')::xml, repeat('toast ' || g, 4000)
  FROM generate_series(1, 30) g;
INSERT INTO zoo (id, born, seen, free, r, d) VALUES (100, DATE '0044-03-15 BC', 'infinity', 'NaN', 'Infinity', '-Infinity');
INSERT INTO lines SELECT g % 5, g, g * 100 FROM generate_series(1, 60) g;
INSERT INTO scratch SELECT g, 'x' FROM generate_series(1, 10) g;
UPDATE zoo SET amount = amount + 1, note = 'updated' WHERE id % 3 = 0;
UPDATE zoo SET id = id + 1000 WHERE id IN (7, 8);
DELETE FROM zoo WHERE id % 10 = 5;
BEGIN; INSERT INTO lines VALUES (9, 1, 1); UPDATE lines SET amount = 2 WHERE account = 9; DELETE FROM lines WHERE account = 9; INSERT INTO lines VALUES (9, 1, 3); COMMIT;
DELETE FROM lines WHERE line > 50;
UPDATE lines SET line = line + 100 WHERE account = 2;
TRUNCATE scratch;
INSERT INTO scratch VALUES (11, 'after truncate')";

const TABLES: [(&str, &str); 3] = [("zoo", "id"), ("lines", "account, line"), ("scratch", "id")];

fn wait_for_equal(source: &str, target: &str) {
    let same = || TABLES.iter().all(|(t, order)| table_json(target, t, order) == table_json(source, t, order));
    if std::panic::catch_unwind(|| wait_until(Duration::from_secs(90), "the target's rows", same)).is_err() {
        for (table, order) in TABLES {
            let (s, t) = (table_json(source, table, order), table_json(target, table, order));
            for (a, b) in s.lines().zip(t.lines()).filter(|(a, b)| a != b).take(3) {
                eprintln!("{table}: source {a}\n{table}: target {b}");
            }
            eprintln!("{table}: {} source rows, {} target rows", s.lines().count(), t.lines().count());
        }
        panic!("the target never matched the source");
    }
}

#[test]
fn apply_mode_mirrors_every_type_key_change_truncate_and_new_column_across_a_restart() {
    let (source, target) = ("pgsink_source", "pgsink_target");
    fresh_database(source);
    fresh_database(target);
    sql(source, ZOO);
    prepare_replication(source, "zoo, lines, scratch");
    sql(source, WORKLOAD);

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pipeline(source, &[sink("replica", target, "")]));
    let config = config.to_str().unwrap();
    let sluice = spawn(&["run", "-c", config], dir.path());
    wait_for_equal(source, target);
    stop(sluice, dir.path());
    let held = scalar(target, "SELECT position FROM sluice.sluice_checkpoints WHERE sink_id = 'replica'");
    assert!(!held.is_empty(), "the sink keeps its position in the target");

    // Written while Sluice is down: a new column, an update that leaves the
    // TOASTed column out of the event, and more rows.
    sql(
        source,
        "ALTER TABLE zoo ADD COLUMN added numeric(8,3);
         UPDATE zoo SET added = id / 7.0, s = s + 1 WHERE id < 20;
         INSERT INTO zoo (id, added, big_text) VALUES (200, 1.5, repeat('late ', 5000));
         ALTER TABLE lines ALTER COLUMN amount TYPE numeric(30,0);
         UPDATE lines SET amount = amount * 1000000000000 WHERE account = 1",
    );
    let sluice = spawn(&["run", "-c", config], dir.path());
    wait_for_equal(source, target);
    stop(sluice, dir.path());
    drop_slots(source);
    let kept = scalar(target, "SELECT count(*) FROM zoo WHERE big_text LIKE 'toast%'");
    assert_eq!(kept, scalar(source, "SELECT count(*) FROM zoo WHERE big_text LIKE 'toast%'"));
    let types = scalar(
        target,
        "SELECT string_agg(column_name || ' ' || data_type, ', ' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_name = 'zoo' AND column_name IN ('amount', 'added', 'feeling')",
    );
    assert_eq!(types, "amount numeric, feeling text, added numeric", "declared types, enums as text");
    let widened = scalar(
        target,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'lines'::regclass AND attname = 'amount'",
    );
    assert_eq!(widened, "numeric(30,0)", "a column the source widened is widened");
}

#[test]
fn a_refused_row_goes_to_the_dead_letter_queue_and_the_rest_of_its_batch_lands_over_existing_rows() {
    let (source, target) = ("pgsink_bad_src", "pgsink_bad_dst");
    fresh_database(source);
    fresh_database(target);
    sql(source, "CREATE TABLE items (id int PRIMARY KEY, qty int)");
    // Row 1 is there already: the sink's insert falls back to an upsert.
    sql(target, "CREATE TABLE items (id int PRIMARY KEY, qty int CHECK (qty < 100)); INSERT INTO items VALUES (1, 1)");
    prepare_replication(source, "items");
    sql(source, "INSERT INTO items VALUES (1, 5), (2, 500), (3, 7); UPDATE items SET qty = qty + 1 WHERE id = 3");

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pipeline(source, &[sink("replica", target, "")]));
    let config = config.to_str().unwrap();
    let sluice = spawn(&["run", "-c", config], dir.path());
    wait_until(Duration::from_secs(60), "the rows the target takes", || {
        table_json(target, "items", "id") == "{\"id\": 1, \"qty\": 5}\n{\"id\": 3, \"qty\": 8}\n"
    });
    stop(sluice, dir.path());
    drop_slots(source);
    let shown = the_dead_letter(config, dir.path());
    assert!(shown.contains("violates check constraint \\\"items_qty_check\\\""), "{shown}");
    assert!(shown.contains("\"qty\": 500"), "the refused event is kept whole: {shown}");
}

#[test]
fn a_target_column_that_cannot_hold_the_source_type_stops_the_sink_naming_it() {
    let (source, target) = ("pgsink_narrow_src", "pgsink_narrow_dst");
    fresh_database(source);
    fresh_database(target);
    sql(source, "CREATE TABLE counts (id int PRIMARY KEY, total bigint)");
    sql(target, "CREATE TABLE counts (id int PRIMARY KEY, total boolean)");
    prepare_replication(source, "counts");
    sql(source, "INSERT INTO counts VALUES (1, 1)");

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pipeline(source, &[sink("replica", target, "")]));
    let sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let log = || std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    let named = "column total of target table public.counts is boolean, which cannot hold the source's bigint";
    wait_until(Duration::from_secs(60), "the error naming the column", || log().contains(named));
    sluice.terminate();
    drop_slots(source);
    assert_eq!(scalar(target, "SELECT count(*) FROM counts"), "0", "nothing written");
}

#[test]
fn a_user_without_privileges_is_told_which_one_is_missing() {
    let (source, target) = ("pgsink_priv_src", "pgsink_priv_dst");
    fresh_database(source);
    fresh_database(target);
    sql(source, "CREATE TABLE things (id int PRIMARY KEY)");
    sql(
        "postgres",
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgsink_weak') THEN CREATE ROLE pgsink_weak LOGIN PASSWORD 'weak-password'; END IF; END $$",
    );
    sql(target, "REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    prepare_replication(source, "things");
    sql(source, "INSERT INTO things VALUES (1)");

    let dir = tempfile::tempdir().unwrap();
    let weak = sink("replica", target, "").replace(
        &format!("user: {}, password: \"${{SLUICE_TEST_PG_PASSWORD}}\"", common::pg::pg_env("SLUICE_TEST_PG_USER")),
        "user: pgsink_weak, password: weak-password",
    );
    let config = write_config(dir.path(), &pipeline(source, &[weak]));
    let mut sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let status = sluice.wait_exit(Duration::from_secs(60));
    drop_slots(source);
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap();
    assert!(!status.success());
    assert!(log.contains("permission denied for database pgsink_priv_dst"), "{log}");
    assert!(log.contains("grant the sink's user the privilege the message names"), "{log}");
    assert!(!log.contains("weak-password"), "no password in the log");
}

#[test]
fn declared_keys_and_left_out_columns_shape_the_target() {
    let (source, target) = ("pgsink_keys_src", "pgsink_keys_dst");
    fresh_database(source);
    fresh_database(target);
    sql(source, "CREATE TABLE events (id int, at int, v text, secret text); ALTER TABLE events REPLICA IDENTITY FULL");
    prepare_replication(source, "events");
    sql(
        source,
        "INSERT INTO events SELECT g, g % 3, 'v' || g, 'hidden' FROM generate_series(1, 20) g;
         UPDATE events SET v = 'changed' WHERE id % 4 = 0; DELETE FROM events WHERE id % 5 = 0",
    );
    let dir = tempfile::tempdir().unwrap();
    let extra = ", keys: { public.events: [id, at] }, columns: { exclude: [public.events.secret] }";
    let config = write_config(dir.path(), &pipeline(source, &[sink("replica", target, extra)]));
    let sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let wanted = table_json(source, "(SELECT id, at, v FROM events)", "id");
    wait_until(Duration::from_secs(60), "the target's rows", || table_json(target, "events", "id") == wanted);
    stop(sluice, dir.path());
    drop_slots(source);
    let key = scalar(
        target,
        "SELECT string_agg(a.attname, ',' ORDER BY a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'events'::regclass AND i.indisprimary",
    );
    assert_eq!(key, "at,id", "the declared key is the target's primary key");
}

#[test]
fn without_auto_create_a_missing_table_stops_the_sink_naming_it() {
    let (source, target) = ("pgsink_nocreate_src", "pgsink_nocreate_dst");
    fresh_database(source);
    fresh_database(target);
    sql(source, "CREATE TABLE things (id int PRIMARY KEY)");
    prepare_replication(source, "things");
    sql(source, "INSERT INTO things VALUES (1)");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &pipeline(source, &[sink("replica", target, ", auto_create: false")]));
    let sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let log = || std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    let named = "target table public.things does not exist; hint: create it, or set auto_create: true";
    wait_until(Duration::from_secs(60), "the error naming the table", || log().contains(named));
    sluice.terminate();
    drop_slots(source);
}

#[test]
fn an_unreachable_target_is_retried_until_it_answers() {
    let (source, target) = ("pgsink_down_src", "pgsink_down_dst");
    fresh_database(source);
    fresh_database(target);
    sql(source, "CREATE TABLE things (id int PRIMARY KEY, v text)");
    prepare_replication(source, "things");
    sql(source, "INSERT INTO things SELECT g, md5(g::text) FROM generate_series(1, 1000) g");

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pg_port = common::pg::pg_env("SLUICE_TEST_PG_PORT");
    let down = sink("replica", target, ", connect_timeout_secs: 2")
        .replace(&format!("port: {pg_port}"), &format!("port: {port}"));
    let config = write_config(dir.path(), &pipeline(source, &[down]));
    let sluice = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    let log = || std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    let server = format!("127.0.0.1:{port}/{target}");
    wait_until(Duration::from_secs(60), "a retried connection", || {
        let log = log();
        log.contains("sink call failed; retrying") && log.contains(&server)
    });
    assert_eq!(scalar(target, "SELECT to_regclass('things') IS NULL"), "t", "nothing written while it is down");

    forward(port, pg_port.parse().unwrap());
    sql(source, "UPDATE things SET v = 'later' WHERE id <= 10");
    let wanted = table_json(source, "things", "id");
    wait_until(Duration::from_secs(60), "the target's rows", || table_json(target, "things", "id") == wanted);
    stop(sluice, dir.path());
    drop_slots(source);
    assert!(!log().contains(&common::pg::pg_env("SLUICE_TEST_PG_PASSWORD")), "no password in the log");
}

/// Pipelines of a fleet open their sinks at the same moment against one
/// target; each creates the shared checkpoint table if it is missing. The
/// catalog refuses the second of two concurrent creations, so without a
/// lock some of these opens fail (a CI run failed this way, with
/// "type sluice_checkpoints already exists").
#[test]
fn sinks_opened_at_once_share_one_new_checkpoint_table() {
    let target = "pgsink_race_dst";
    fresh_database(target);
    let env = |name: &str| std::env::var(name).ok();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut opens = tokio::task::JoinSet::new();
    for n in 0..8 {
        let text = format!(
            "pipelines:\n  - name: race\n    source: {{ type: generator, config: {{ id: g }} }}\n    sinks:\n      - type: postgres\n        config: {}\n",
            sink(&format!("s{n}"), target, "")
        );
        let config = sluice_config::parse(std::path::Path::new("race.yaml"), &text, env).unwrap();
        let staging = tempfile::tempdir().unwrap();
        let context = sluice_sinks::SinkContext {
            pipeline: format!("race{n}"),
            source_id: "g".into(),
            data_dir: staging.path().into(),
        };
        let mut built = sluice_sinks::build(&config.pipelines[0].sinks[0], &context).unwrap();
        opens.spawn_on(
            async move {
                let opened = built.open().await.map_err(|e| e.to_string());
                drop(staging);
                opened
            },
            runtime.handle(),
        );
    }
    let opened = runtime.block_on(opens.join_all());
    assert_eq!(opened, vec![Ok(None); 8], "every sink opens, and finds nothing written");
    assert_eq!(scalar(target, "SELECT count(*) FROM sluice.sluice_checkpoints"), "0");
}
