use std::path::Path;

use super::*;

const EXAMPLE: &str = r#"
pipelines:
  - name: orders
    source: { type: generator, config: { id: gen1, tx_count: 100000, rows_per_tx: 10 } }
    sinks:
      - type: file
        config: { id: local, path: ./out/orders.jsonl, required: true }
    batch: { max_events: 2000, max_bytes: 16777216, max_ms: 50, max_inflight: 4, respect_source_tx: true }
    commit_policy: { mode: required }
    sink_batch_deadline_secs: 60
"#;

fn no_env(_: &str) -> Option<String> {
    None
}

fn check(text: &str) -> Result<Config, ConfigError> {
    let config = parse(Path::new("test.yaml"), text, no_env)?;
    validate(&config)?;
    Ok(config)
}

fn error_text(text: &str) -> String {
    check(text).unwrap_err().to_string()
}

#[test]
fn the_documented_example_parses() {
    let config = check(EXAMPLE).unwrap();
    let pipeline = &config.pipelines[0];
    assert_eq!(pipeline.name, "orders");
    assert_eq!(pipeline.source.id(), "gen1");
    assert_eq!(pipeline.sinks[0].id(), "local");
    assert!(pipeline.sinks[0].required());
    assert_eq!(pipeline.batch.max_inflight, 4);
}

#[test]
fn omitted_settings_take_the_documented_defaults() {
    let config = check(
        "pipelines:\n  - name: p\n    source: { type: generator, config: { id: g } }\n    sinks: [ { type: stdout, config: { id: out } } ]\n",
    )
    .unwrap();
    let pipeline = &config.pipelines[0];
    assert_eq!(pipeline.batch.max_events, DEFAULT_MAX_EVENTS);
    assert_eq!(pipeline.batch.max_bytes, DEFAULT_MAX_BYTES);
    assert_eq!(pipeline.batch.max_ms, DEFAULT_MAX_MS);
    assert_eq!(pipeline.batch.max_inflight, DEFAULT_MAX_INFLIGHT);
    assert_eq!(pipeline.batch.respect_source_tx, DEFAULT_RESPECT_SOURCE_TX);
    assert_eq!(pipeline.sink_batch_deadline_secs, DEFAULT_SINK_BATCH_DEADLINE_SECS);
    assert_eq!(pipeline.commit_policy.mode, PolicyMode::Required);
    assert_eq!(pipeline.sinks[0].required(), DEFAULT_REQUIRED);
    let SourceConfig::Generator(generator) = &pipeline.source else { panic!("generator expected") };
    assert_eq!(generator.rows_per_tx, DEFAULT_GENERATOR_ROWS_PER_TX);
    assert_eq!(generator.tables, vec![DEFAULT_GENERATOR_TABLE.to_string()]);
    assert_eq!(generator.tx_count, None);
}

#[test]
fn unknown_fields_are_named() {
    let text = EXAMPLE.replace("path: ./out", "pth: ./out");
    let message = error_text(&text);
    assert!(message.contains("unknown field `pth`"), "{message}");
    assert!(message.contains("pipelines[0].sinks[0]"), "{message}");
    assert!(message.contains("`path`"), "{message}");
    let message = error_text(&EXAMPLE.replace("max_ms: 50", "max_msec: 50"));
    assert!(message.contains("unknown field `max_msec`"), "{message}");
}

#[test]
fn unknown_types_list_the_allowed_ones() {
    let message = error_text(&EXAMPLE.replace("type: file", "type: fiel"));
    assert!(message.contains("unknown variant `fiel`"), "{message}");
    assert!(message.contains("`file`") && message.contains("`stdout`"), "{message}");
    let message = error_text(&EXAMPLE.replace("mode: required", "mode: most"));
    assert!(message.contains("`required`, `all`, `quorum`"), "{message}");
}

#[test]
fn variables_expand_and_unset_ones_fail() {
    let text = EXAMPLE.replace("./out/orders.jsonl", "${OUT_DIR:-/tmp}/orders.jsonl");
    let config = check(&text).unwrap();
    let SinkConfig::File(file) = &config.pipelines[0].sinks[0] else { panic!("file sink expected") };
    assert_eq!(file.path, Path::new("/tmp/orders.jsonl"));
    let text = EXAMPLE.replace("./out/orders.jsonl", "${OUT_DIR}/orders.jsonl");
    let message = error_text(&text);
    assert!(message.contains("line 7") && message.contains("OUT_DIR is not set"), "{message}");
}

#[test]
fn duplicate_sink_ids_are_refused() {
    let text = EXAMPLE.replace("sinks:\n", "sinks:\n      - type: stdout\n        config: { id: local }\n");
    let message = error_text(&text);
    assert!(message.contains("pipelines[0].sinks[1].config.id"), "{message}");
    assert!(message.contains("used twice"), "{message}");
}

#[test]
fn quorum_must_fit_the_sink_count() {
    let message = error_text(&EXAMPLE.replace("mode: required", "mode: quorum, quorum: 3"));
    assert!(message.contains("pipelines[0].commit_policy.quorum"), "{message}");
    assert!(message.contains("from 1 to 1"), "{message}");
    let message = error_text(&EXAMPLE.replace("mode: required", "mode: quorum"));
    assert!(message.contains("needs a quorum"), "{message}");
    let message = error_text(&EXAMPLE.replace("mode: required", "mode: all, quorum: 1"));
    assert!(message.contains("only read with mode: quorum"), "{message}");
    assert!(check(&EXAMPLE.replace("mode: required", "mode: quorum, quorum: 1")).is_ok());
}

#[test]
fn zero_limits_and_bad_ids_are_refused() {
    let message = error_text(&EXAMPLE.replace("max_inflight: 4", "max_inflight: 0"));
    assert!(message.contains("pipelines[0].batch.max_inflight: 0 is outside 1..=1024"), "{message}");
    let message = error_text(&EXAMPLE.replace("id: local", "id: \"a::b\""));
    assert!(message.contains("pipelines[0].sinks[0].config.id"), "{message}");
    let message = error_text(&EXAMPLE.replace("sink_batch_deadline_secs: 60", "sink_batch_deadline_secs: 0"));
    assert!(message.contains("sink_batch_deadline_secs"), "{message}");
    let message = error_text(&EXAMPLE.replace("required: true", "required: false"));
    assert!(message.contains("commit_policy.mode"), "{message}");
}

#[test]
fn malformed_yaml_names_the_file_and_line() {
    let message = error_text("pipelines:\n  - name: [oops\n");
    assert!(message.starts_with("test.yaml:"), "{message}");
    assert!(message.contains("line"), "{message}");
}

#[test]
fn a_folder_merges_its_files_and_checks_across_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), EXAMPLE).unwrap();
    let second = EXAMPLE.replace("name: orders", "name: orders2").replace("orders.jsonl", "orders2.jsonl");
    std::fs::write(dir.path().join("b.yml"), &second).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not config").unwrap();
    let message = load_with(dir.path(), no_env).unwrap_err().to_string();
    assert!(message.contains("pipelines[1].source.config.id"), "{message}");
    std::fs::write(dir.path().join("b.yml"), second.replace("id: gen1", "id: gen2")).unwrap();
    let config = load_with(dir.path(), no_env).unwrap();
    assert_eq!(config.pipelines.len(), 2);
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(load_with(empty.path(), no_env), Err(ConfigError::EmptyFolder { .. })));
    assert!(matches!(load_with(&dir.path().join("missing.yaml"), no_env), Err(ConfigError::Read { .. })));
}

#[test]
fn slo_limits_are_checked_and_named() {
    let generator = "pipelines:\n  - name: p\n    source: { type: generator, config: { id: g } }\n    sinks: [ { type: stdout, config: { id: out } } ]\n";
    let config = check(generator).unwrap();
    assert_eq!(config.pipelines[0].slo.max_failing_secs, DEFAULT_MAX_FAILING_SECS);
    assert_eq!(config.pipelines[0].slo.max_lag_seconds, None);
    let with = |slo: &str| format!("{generator}    slo: {slo}\n");
    let config = check(&with("{ max_lag_seconds: 30, max_failing_secs: 10 }")).unwrap();
    assert_eq!(config.pipelines[0].slo.max_lag_seconds, Some(30));

    let message = error_text(&with("{ max_lag_seconds: 0 }"));
    assert!(message.contains("pipelines[0].slo.max_lag_seconds"), "{message}");
    let message = error_text(&with("{ max_failing_secs: 0 }"));
    assert!(message.contains("pipelines[0].slo.max_failing_secs"), "{message}");
    let message = error_text(&with("{ max_retained_wal_bytes: 1000 }"));
    assert!(message.contains("pipelines[0].slo.max_retained_wal_bytes"), "{message}");
    assert!(message.contains("only a PostgreSQL source"), "{message}");
    let message = error_text(&with("{ detach_optional_sinks: true }"));
    assert!(message.contains("pipelines[0].slo.detach_optional_sinks"), "{message}");
    assert!(message.contains("needs max_retained_wal_bytes"), "{message}");
    let message = error_text(&with("{ max_lag: 3 }"));
    assert!(message.contains("unknown field `max_lag`"), "{message}");
    let config = check(&with("{ max_duplicate_ratio: 0.01 }")).unwrap();
    assert_eq!(config.pipelines[0].slo.duplicate_window_secs, DEFAULT_DUPLICATE_WINDOW_SECS);
    for ratio in ["0", "1.5", "-0.1", ".nan"] {
        let message = error_text(&with(&format!("{{ max_duplicate_ratio: {ratio} }}")));
        assert!(message.contains("pipelines[0].slo.max_duplicate_ratio"), "{ratio}: {message}");
    }
    let message = error_text(&with("{ max_duplicate_ratio: 0.1, duplicate_window_secs: 0 }"));
    assert!(message.contains("pipelines[0].slo.duplicate_window_secs"), "{message}");
    // A file sink is exactly-once: it writes nothing again.
    let exactly_once =
        generator.replace("{ type: stdout, config: { id: out } }", "{ type: file, config: { id: f, path: o.jsonl } }");
    let message = error_text(&format!("{exactly_once}    slo: {{ max_duplicate_ratio: 0.1 }}\n"));
    assert!(message.contains("no sink of the pipeline is at-least-once"), "{message}");
}

#[test]
fn detaching_sinks_needs_a_policy_that_can_leave_one_behind() {
    let postgres = "pipelines:\n  - name: p\n    source: { type: postgres, config: { id: pg, host: 127.0.0.1, database: d, user: u, password: pw, tables: [public.t] } }\n    sinks: [ { type: stdout, config: { id: out } } ]\n    slo: { max_retained_wal_bytes: 1000, detach_optional_sinks: true }\n";
    check(postgres).unwrap();
    let message = error_text(&format!("{postgres}    commit_policy: {{ mode: all }}\n"));
    assert!(message.contains("pipelines[0].slo.detach_optional_sinks"), "{message}");
    assert!(message.contains("mode all"), "{message}");
}

mod limits;
mod sinks;
mod sources;

#[test]
fn the_store_defaults_to_embedded_and_its_postgres_settings_are_checked() {
    assert!(matches!(check(EXAMPLE).unwrap().store(), StoreConfig::Embedded));
    let with = |config: &str| format!("store:\n  type: postgres\n  config: {config}\n{EXAMPLE}");
    let config = check(&with("{ host: db, database: d, user: u, password: p }")).unwrap();
    let StoreConfig::Postgres(store) = config.store() else { panic!("not the postgres store") };
    assert_eq!(
        (store.port, store.schema.as_str(), store.outage_secs, store.ssl_mode),
        (5432, DEFAULT_STORE_SCHEMA, DEFAULT_STORE_OUTAGE_SECS, DEFAULT_SSL_MODE)
    );
    for (config, field) in [
        ("{ host: db, database: d, user: u, schema: Bad-Name }", "store.config.schema"),
        ("{ host: '', database: d, user: u }", "store.config.host"),
        ("{ host: db, database: d, user: u, ssl_mode: verify-full }", "store.config.ca_file"),
        ("{ host: db, database: d, user: u, outage_secs: 0 }", "store.config.outage_secs"),
    ] {
        let message = error_text(&with(config));
        assert!(message.starts_with(field) && message.contains("hint"), "{config}: {message}");
    }
    assert!(error_text(&with("{ host: db, database: d, user: u, url: x }")).contains("unknown field `url`"));
}

#[test]
fn one_file_of_a_folder_may_set_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = "store: { type: postgres, config: { host: db, database: d, user: u } }\n";
    std::fs::write(dir.path().join("a.yaml"), format!("{store}{EXAMPLE}")).unwrap();
    let second = EXAMPLE.replace("orders", "orders2").replace("gen1", "gen2");
    std::fs::write(dir.path().join("b.yaml"), &second).unwrap();
    assert!(matches!(load_with(dir.path(), no_env).unwrap().store(), StoreConfig::Postgres(_)));
    std::fs::write(dir.path().join("b.yaml"), format!("{store}{second}")).unwrap();
    let message = load_with(dir.path(), no_env).unwrap_err().to_string();
    assert!(message.contains("a.yaml") && message.contains("b.yaml") && message.contains("one file"), "{message}");
}

#[test]
fn the_fleet_section_defaults_to_postgres_leases_and_its_etcd_settings_are_checked() {
    let fleet = check(EXAMPLE).unwrap().fleet();
    assert!(matches!(fleet.leases, LeasesConfig::Postgres));
    assert_eq!((fleet.lease_ttl_secs, fleet.renew_every_secs), (DEFAULT_LEASE_TTL_SECS, DEFAULT_RENEW_EVERY_SECS));
    let with = |fleet: &str| format!("fleet: {fleet}\n{EXAMPLE}");
    let etcd = check(&with("{ leases: { type: etcd, config: { endpoints: [\"https://e:2379\"] } } }")).unwrap();
    let LeasesConfig::Etcd(config) = etcd.fleet().leases else { panic!("not etcd") };
    assert_eq!((config.prefix.as_str(), config.timeout_secs), (DEFAULT_ETCD_PREFIX, DEFAULT_ETCD_TIMEOUT_SECS));
    for (fleet, field) in [
        ("{ lease_ttl_secs: 4, renew_every_secs: 2 }", "fleet.renew_every_secs"),
        ("{ lease_ttl_secs: 0 }", "fleet.lease_ttl_secs"),
        ("{ leases: { type: etcd, config: { endpoints: [] } } }", "fleet.leases.config.endpoints"),
        ("{ leases: { type: etcd, config: { endpoints: [\"e:2379\"] } } }", "fleet.leases.config.endpoints[0]"),
        ("{ leases: { type: etcd, config: { endpoints: [\"http://u:p@e\"] } } }", "fleet.leases.config.endpoints[0]"),
        (
            "{ leases: { type: etcd, config: { endpoints: [\"http://e\"], cert_file: c } } }",
            "fleet.leases.config.cert_file",
        ),
        (
            "{ leases: { type: etcd, config: { endpoints: [\"http://e\"], timeout_secs: 10 } } }",
            "fleet.leases.config.timeout_secs",
        ),
    ] {
        let message = error_text(&with(fleet));
        assert!(message.starts_with(field) && message.contains("hint"), "{fleet}: {message}");
        assert!(!message.contains("u:p@"), "{message}");
    }
}
