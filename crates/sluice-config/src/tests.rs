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

const POSTGRES: &str = r#"
pipelines:
  - name: shop
    source:
      type: postgres
      config: { id: pg1, host: 127.0.0.1, database: shop, user: sluice, password: "${PGPASS:-secret}" }
    sinks:
      - type: stdout
        config: { id: out }
"#;

#[test]
fn postgres_source_defaults_and_secret_redaction() {
    let config = check(POSTGRES).unwrap();
    let SourceConfig::Postgres(pg) = &config.pipelines[0].source else { panic!("postgres expected") };
    assert_eq!(pg.port, DEFAULT_POSTGRES_PORT);
    assert_eq!(pg.ssl_mode, DEFAULT_SSL_MODE);
    assert_eq!(pg.slot_name(), "sluice_pg1");
    assert_eq!(pg.publication_name(), "sluice_pg1");
    assert_eq!(pg.tables, vec![DEFAULT_TABLE_PATTERN.to_string()]);
    assert_eq!(pg.password.expose(), "secret");
    let debug = format!("{config:?}");
    assert!(!debug.contains("secret") && debug.contains("***"), "{debug}");
}

#[test]
fn a_postgres_snapshot_is_off_unless_asked_for() {
    let config = check(POSTGRES).unwrap();
    let SourceConfig::Postgres(pg) = &config.pipelines[0].source else { panic!("not postgres") };
    assert_eq!(pg.snapshot, SnapshotConfig::default());
    assert_eq!(pg.snapshot.mode, SnapshotMode::Never);
    let text = POSTGRES.replace("user: sluice", "user: sluice, snapshot: { mode: initial, chunk_size: 500 }");
    let config = check(&text).unwrap();
    let SourceConfig::Postgres(pg) = &config.pipelines[0].source else { panic!("not postgres") };
    assert_eq!(
        (pg.snapshot.mode, pg.snapshot.chunk_size, pg.snapshot.max_parallel_tables),
        (SnapshotMode::Initial, 500, DEFAULT_SNAPSHOT_MAX_PARALLEL_TABLES)
    );
}

#[test]
fn postgres_source_rules_name_the_field() {
    let cases = [
        (POSTGRES.replace("user: sluice", "user: sluice, ssl_mode: verify-full"), "config.ca_file"),
        (POSTGRES.replace("user: sluice", "user: sluice, ssl_mode: sometimes"), "`verify-full`"),
        (POSTGRES.replace("user: sluice", "user: sluice, slot: Bad-Slot"), "config.slot"),
        (POSTGRES.replace("user: sluice", "user: sluice, tables: [orders]"), "config.tables[0]"),
        (POSTGRES.replace("user: sluice", "user: sluice, heartbeat_secs: 0"), "config.heartbeat_secs"),
        (POSTGRES.replace("host: 127.0.0.1", "host: \"\""), "config.host"),
        (POSTGRES.replace("user: sluice", "user: sluice, pasword: x"), "unknown field `pasword`"),
        (POSTGRES.replace("user: sluice", "user: sluice, snapshot: { mode: sometimes }"), "`when_needed`"),
        (POSTGRES.replace("user: sluice", "user: sluice, snapshot: { chunk_size: 0 }"), "config.snapshot.chunk_size"),
        (
            POSTGRES.replace("user: sluice", "user: sluice, snapshot: { max_parallel_tables: 0 }"),
            "config.snapshot.max_parallel_tables",
        ),
        (POSTGRES.replace("user: sluice", "user: sluice, snapshot: { mood: initial }"), "unknown field `mood`"),
    ];
    for (text, field) in cases {
        let message = error_text(&text);
        assert!(message.contains(field), "expected {field} in {message}");
    }
}

const MYSQL: &str = r#"
pipelines:
  - name: shop
    source:
      type: mysql
      config: { id: my1, host: 127.0.0.1, user: sluice, tables: [shop.*] }
    sinks:
      - type: stdout
        config: { id: out }
"#;

#[test]
fn mysql_start_takes_three_forms_and_names_mistakes() {
    let start = |text: &str| {
        let config = check(&MYSQL.replace("tables: [shop.*]", &format!("tables: [shop.*], start: {text}")))?;
        let SourceConfig::Mysql(my) = &config.pipelines[0].source else { panic!("mysql expected") };
        Ok::<_, ConfigError>(my.start.clone())
    };
    assert_eq!(start("current").unwrap(), MysqlStart::Current);
    assert_eq!(
        start("{ file: mariadb-bin.000002, offset: 120 }").unwrap(),
        MysqlStart::Position { file: "mariadb-bin.000002".into(), offset: 120 }
    );
    assert_eq!(start("{ gtid: \"0-1-100\" }").unwrap(), MysqlStart::Gtid("0-1-100".into()));
    let message = start("{ file: x }").unwrap_err().to_string();
    assert!(message.contains("start") && message.contains("{ gtid: STATE }"), "{message}");
    let message = start("{ file: b.000001, ofset: 4 }").unwrap_err().to_string();
    assert!(message.contains("unknown field `ofset`"), "{message}");
    let message = start("{ file: b.000001, offset: 2 }").unwrap_err().to_string();
    assert!(message.contains("pipelines[0].source.config.start") && message.contains("4..=4294967295"), "{message}");
    let config = check(MYSQL).unwrap();
    let SourceConfig::Mysql(my) = &config.pipelines[0].source else { panic!("mysql expected") };
    assert_eq!(my.port, DEFAULT_MYSQL_PORT);
    assert!(my.replica_server_id() >= 1_000_000);
}

#[test]
fn a_mysql_snapshot_is_checked_like_postgres_and_excludes_a_start_position() {
    let with = |extra: &str| MYSQL.replace("tables: [shop.*]", &format!("tables: [shop.*], {extra}"));
    let config = check(&with("snapshot: { mode: initial, max_parallel_tables: 1 }")).unwrap();
    let SourceConfig::Mysql(my) = &config.pipelines[0].source else { panic!("mysql expected") };
    assert_eq!((my.snapshot.mode, my.snapshot.max_parallel_tables), (SnapshotMode::Initial, 1));
    let message = error_text(&with("snapshot: { mode: initial }, start: { file: b.000001, offset: 4 }"));
    assert!(message.contains("config.start") && message.contains("snapshot.mode"), "{message}");
    let message = error_text(&with("snapshot: { chunk_size: 2000000 }"));
    assert!(message.contains("config.snapshot.chunk_size"), "{message}");
    let message = error_text(&with("signal_table: \"shop.a;b\""));
    assert!(message.contains("config.signal_table"), "{message}");
    assert!(check(&with("signal_table: shop.sluice_signal")).is_ok());
    let message = error_text(&with("snapshot: { mode: when_needed }"));
    assert!(message.contains("config.signal_table"), "{message}");
    let config = check(&with("snapshot: { mode: always }, signal_table: shop.s")).unwrap();
    let SourceConfig::Mysql(my) = &config.pipelines[0].source else { panic!("mysql expected") };
    assert!(my.snapshot.mode.initial());
}

#[test]
fn mysql_ddl_literals_default_to_redact_and_name_the_choices() {
    let with = |extra: &str| MYSQL.replace("tables: [shop.*]", &format!("tables: [shop.*], {extra}"));
    let config = check(MYSQL).unwrap();
    let SourceConfig::Mysql(my) = &config.pipelines[0].source else { panic!("mysql expected") };
    assert_eq!(my.ddl_literals, DdlLiterals::Redact);
    let config = check(&with("ddl_literals: keep")).unwrap();
    let SourceConfig::Mysql(my) = &config.pipelines[0].source else { panic!("mysql expected") };
    assert_eq!(my.ddl_literals, DdlLiterals::Keep);
    let message = error_text(&with("ddl_literals: show"));
    assert!(
        message.contains("ddl_literals") && message.contains("`redact`") && message.contains("`keep`"),
        "{message}"
    );
}

#[test]
fn table_patterns_glob() {
    assert!(glob_match("public.*", "public.orders"));
    assert!(glob_match("*.order_*", "sales.order_items"));
    assert!(!glob_match("public.*", "sales.orders"));
    assert!(glob_match("public.orders", "public.orders"));
    assert!(!glob_match("public.order", "public.orders"));
}

const HTTP: &str = r#"
pipelines:
  - name: hooks
    source: { type: generator, config: { id: gen1 } }
    sinks:
      - type: http
        config: { id: hook, url: "https://hooks.example/${table}/${key.id}", headers: { Authorization: "Bearer tok" } }
"#;

#[test]
fn http_sink_defaults_guarantee_and_secret_headers() {
    let config = check(HTTP).unwrap();
    let sink = &config.pipelines[0].sinks[0];
    let SinkConfig::Http(http) = sink else { panic!("http expected") };
    assert_eq!(http.method, HttpMethod::Post);
    assert_eq!(http.mode, HttpMode::Single);
    assert_eq!(http.timeout_secs, DEFAULT_HTTP_TIMEOUT_SECS);
    assert_eq!(http.max_attempts, DEFAULT_HTTP_MAX_ATTEMPTS);
    assert_eq!(http.signature_header, DEFAULT_HTTP_SIGNATURE_HEADER);
    assert_eq!(sink.guarantee().to_string(), "at-least-once (dedup: Idempotency-Key = event id)");
    let debug = format!("{config:?}");
    assert!(!debug.contains("Bearer tok") && debug.contains("***"), "{debug}");
    let batch = check(&HTTP.replace("id: hook,", "id: hook, mode: batch,")).unwrap();
    assert_eq!(
        batch.pipelines[0].sinks[0].guarantee().to_string(),
        "at-least-once (dedup: event id in each array element)"
    );
}

#[test]
fn http_sink_rules_name_the_field() {
    let cases = [
        (HTTP.replace("https://hooks.example", "ftp://hooks.example"), "config.url"),
        (HTTP.replace("https://hooks.example", "https://"), "config.url"),
        (HTTP.replace("${table}", "${tabel}"), "tabel is not set"),
        (HTTP.replace("Authorization", "Idempotency-Key"), "config.headers.Idempotency-Key"),
        (HTTP.replace("Authorization", "\"Bad Header\""), "config.headers.Bad Header"),
        (HTTP.replace("id: hook,", "id: hook, max_attempts: 0,"), "config.max_attempts"),
        (HTTP.replace("id: hook,", "id: hook, timeout_secs: 0,"), "config.timeout_secs"),
        (HTTP.replace("id: hook,", "id: hook, mode: batch, batch_max_events: 0,"), "config.batch_max_events"),
        (HTTP.replace("id: hook,", "id: hook, method: GET,"), "`POST`"),
        (HTTP.replace("id: hook,", "id: hook, signature_header: \"x y\","), "config.signature_header"),
    ];
    for (text, field) in cases {
        let message = error_text(&text);
        assert!(message.contains(field), "expected {field} in {message}");
    }
}

const S3: &str = r#"
pipelines:
  - name: lake
    source: { type: generator, config: { id: gen1 } }
    sinks:
      - type: s3
        config: { id: lake, bucket: my-lake, prefix: cdc/orders, secret_access_key: "hush", access_key_id: AKIA }
"#;

#[test]
fn s3_sink_defaults_guarantee_and_secrets() {
    let config = check(S3).unwrap();
    let sink = &config.pipelines[0].sinks[0];
    let SinkConfig::S3(s3) = sink else { panic!("s3 expected") };
    assert_eq!(s3.format, FileFormat::Parquet);
    assert_eq!(s3.compression(), Compression::Snappy);
    assert_eq!(s3.max_file_bytes, DEFAULT_S3_MAX_FILE_BYTES);
    assert_eq!(s3.max_file_age_secs, DEFAULT_S3_MAX_FILE_AGE_SECS);
    assert_eq!(s3.part_size_bytes, DEFAULT_S3_PART_SIZE_BYTES);
    assert_eq!(sink.guarantee().to_string(), "exactly-once (at file level; one writer per sink and prefix)");
    let debug = format!("{config:?}");
    assert!(!debug.contains("hush") && !debug.contains("AKIA"), "{debug}");
    let local = check(&S3.replace(
        "bucket: my-lake, prefix: cdc/orders, secret_access_key: \"hush\", access_key_id: AKIA",
        "local: ./lake, format: jsonl",
    ))
    .unwrap();
    let SinkConfig::S3(local) = &local.pipelines[0].sinks[0] else { panic!("s3 expected") };
    assert_eq!(local.compression(), Compression::None);
}

#[test]
fn s3_sink_rules_name_the_field() {
    let cases = [
        (S3.replace("bucket: my-lake,", "bucket: my-lake, local: ./lake,"), "config.bucket"),
        (S3.replace("bucket: my-lake,", ""), "config.bucket"),
        (S3.replace("my-lake", "My_Lake"), "config.bucket"),
        (S3.replace("prefix: cdc/orders", "prefix: /cdc"), "config.prefix"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc/../x"), "config.prefix"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, compression: gzip"), "config.compression"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, format: jsonl, compression: snappy"), "config.compression"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, max_file_bytes: 1000"), "config.max_file_bytes"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, part_size_bytes: 1000"), "config.part_size_bytes"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, max_file_age_secs: 0"), "config.max_file_age_secs"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, endpoint: 127.0.0.1:9000"), "config.endpoint"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, format: orc"), "unknown variant `orc`"),
    ];
    for (text, field) in cases {
        let message = error_text(&text);
        assert!(message.contains(field), "expected {field} in {message}");
    }
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
}

#[test]
fn detaching_sinks_needs_a_policy_that_can_leave_one_behind() {
    let postgres = "pipelines:\n  - name: p\n    source: { type: postgres, config: { id: pg, host: 127.0.0.1, database: d, user: u, password: pw, tables: [public.t] } }\n    sinks: [ { type: stdout, config: { id: out } } ]\n    slo: { max_retained_wal_bytes: 1000, detach_optional_sinks: true }\n";
    check(postgres).unwrap();
    let message = error_text(&format!("{postgres}    commit_policy: {{ mode: all }}\n"));
    assert!(message.contains("pipelines[0].slo.detach_optional_sinks"), "{message}");
    assert!(message.contains("mode all"), "{message}");
}

/// A generator pipeline with `source` added to the generator's settings,
/// `sink` as its one sink, and `extra` as more lines of the pipeline.
fn bounded_case(source: &str, sink: &str, extra: &str) -> String {
    format!(
        "pipelines:\n  - name: p\n    source: {{ type: generator, config: {{ id: g{source} }} }}\n    sinks: [ {sink} ]\n{extra}"
    )
}

fn database_case(kind: &str, settings: &str) -> String {
    let base = match kind {
        "postgres" => "id: pg1, host: h, database: d, user: u",
        _ => "id: my1, host: h, user: u, tables: [shop.*]",
    };
    format!(
        "pipelines:\n  - name: p\n    source: {{ type: {kind}, config: {{ {base}, {settings} }} }}\n    sinks: [ {{ type: stdout, config: {{ id: out }} }} ]\n"
    )
}

#[test]
fn every_numeric_setting_is_bounded_and_the_error_names_the_field_and_range() {
    const MAX: &str = "18446744073709551615";
    let stdout = "{ type: stdout, config: { id: out } }";
    let sink = |kind: &str, settings: &str| format!("{{ type: {kind}, config: {{ id: s, {settings} }} }}");
    let kafka = |s: &str| sink("kafka", &format!("brokers: \"k:9092\", {s}"));
    let redis = |s: &str| sink("redis", &format!("url: \"redis://r\", stream: x, {s}"));
    let nats = |s: &str| sink("nats", &format!("url: \"nats://n\", stream: x, {s}"));
    let http = |s: &str| sink("http", &format!("url: \"http://h/x\", {s}"));
    let s3 = |s: &str| sink("s3", &format!("bucket: bkt, {s}"));
    let pipeline = |extra: &str| bounded_case("", stdout, &format!("    {extra}\n"));
    let generator = |s: &str| bounded_case(&format!(", {s}"), stdout, "");
    let at = "pipelines[0]";
    let sink_at = "pipelines[0].sinks[0].config";
    let source_at = "pipelines[0].source.config";
    let cases: Vec<(String, String, &str)> = vec![
        (pipeline(&format!("batch: {{ max_inflight: {MAX} }}")), format!("{at}.batch.max_inflight"), "1..=1024"),
        (pipeline("batch: { max_inflight: 0 }"), format!("{at}.batch.max_inflight"), "1..=1024"),
        (pipeline(&format!("batch: {{ max_events: {MAX} }}")), format!("{at}.batch.max_events"), "1..=1000000"),
        (pipeline(&format!("batch: {{ max_bytes: {MAX} }}")), format!("{at}.batch.max_bytes"), "1..=1073741824"),
        (pipeline(&format!("batch: {{ max_ms: {MAX} }}")), format!("{at}.batch.max_ms"), "1..=3600000"),
        (
            pipeline(&format!("dead_letter: {{ max_entries: {MAX} }}")),
            format!("{at}.dead_letter.max_entries"),
            "1..=100000000",
        ),
        (pipeline(&format!("sink_batch_deadline_secs: {MAX}")), format!("{at}.sink_batch_deadline_secs"), "1..=86400"),
        (pipeline(&format!("slo: {{ max_failing_secs: {MAX} }}")), format!("{at}.slo.max_failing_secs"), "1..=86400"),
        (pipeline(&format!("slo: {{ max_lag_seconds: {MAX} }}")), format!("{at}.slo.max_lag_seconds"), "1..=604800"),
        (pipeline("commit_policy: { mode: quorum, quorum: 2 }"), format!("{at}.commit_policy.quorum"), "1..=1"),
        (generator(&format!("rows_per_tx: {}", u32::MAX)), format!("{source_at}.rows_per_tx"), "1..=1000000"),
        (generator(&format!("tx_count: {MAX}")), format!("{source_at}.tx_count"), "1..=1000000000000"),
        (generator("tx_count: 0"), format!("{source_at}.tx_count"), "1..=1000000000000"),
        (generator(&format!("events_per_sec: {MAX}")), format!("{source_at}.events_per_sec"), "1..=100000000"),
        (database_case("postgres", "port: 0"), format!("{source_at}.port"), "port 0"),
        (
            database_case("postgres", &format!("connect_timeout_secs: {MAX}")),
            format!("{source_at}.connect_timeout_secs"),
            "1..=3600",
        ),
        (
            database_case("postgres", &format!("heartbeat_secs: {MAX}")),
            format!("{source_at}.heartbeat_secs"),
            "1..=86400",
        ),
        (
            database_case("postgres", &format!("status_interval_secs: {MAX}")),
            format!("{source_at}.status_interval_secs"),
            "1..=3600",
        ),
        (
            database_case("postgres", &format!("snapshot: {{ chunk_size: {MAX} }}")),
            format!("{source_at}.snapshot.chunk_size"),
            "1..=1000000",
        ),
        (
            database_case("mysql", &format!("snapshot: {{ max_parallel_tables: {MAX} }}")),
            format!("{source_at}.snapshot.max_parallel_tables"),
            "1..=64",
        ),
        (database_case("mysql", &format!("heartbeat_secs: {MAX}")), format!("{source_at}.heartbeat_secs"), "1..=3600"),
        (
            database_case("mysql", &format!("connect_timeout_secs: {MAX}")),
            format!("{source_at}.connect_timeout_secs"),
            "1..=3600",
        ),
        (
            database_case("mysql", &format!("start: {{ file: mariadb-bin.000001, offset: {MAX} }}")),
            format!("{source_at}.start"),
            "4..=4294967295",
        ),
        (bounded_case("", &kafka(&format!("timeout_secs: {MAX}")), ""), format!("{sink_at}.timeout_secs"), "1..=3600"),
        (
            bounded_case("", &redis(&format!("maxlen: {MAX}")), ""),
            format!("{sink_at}.maxlen"),
            "1..=9223372036854775807",
        ),
        (bounded_case("", &redis(&format!("timeout_secs: {MAX}")), ""), format!("{sink_at}.timeout_secs"), "1..=3600"),
        (
            bounded_case("", &nats(&format!("duplicate_window_secs: {MAX}")), ""),
            format!("{sink_at}.duplicate_window_secs"),
            "1..=86400",
        ),
        (bounded_case("", &nats(&format!("timeout_secs: {MAX}")), ""), format!("{sink_at}.timeout_secs"), "1..=3600"),
        (
            bounded_case("", &http(&format!("batch_max_events: {MAX}")), ""),
            format!("{sink_at}.batch_max_events"),
            "1..=100000",
        ),
        (
            bounded_case("", &http(&format!("max_attempts: {}", u32::MAX)), ""),
            format!("{sink_at}.max_attempts"),
            "1..=100",
        ),
        (
            bounded_case("", &http(&format!("initial_backoff_ms: {MAX}")), ""),
            format!("{sink_at}.initial_backoff_ms"),
            "1..=60000",
        ),
        (
            bounded_case("", &http(&format!("max_backoff_secs: {MAX}")), ""),
            format!("{sink_at}.max_backoff_secs"),
            "1..=3600",
        ),
        (bounded_case("", &http(&format!("timeout_secs: {MAX}")), ""), format!("{sink_at}.timeout_secs"), "1..=3600"),
        (
            bounded_case("", &s3(&format!("max_file_bytes: {MAX}")), ""),
            format!("{sink_at}.max_file_bytes"),
            "1048576..=5497558138880",
        ),
        (
            bounded_case("", &s3(&format!("max_file_events: {MAX}")), ""),
            format!("{sink_at}.max_file_events"),
            "1..=1000000000000",
        ),
        (
            bounded_case("", &s3(&format!("max_file_age_secs: {MAX}")), ""),
            format!("{sink_at}.max_file_age_secs"),
            "1..=86400",
        ),
        (
            bounded_case("", &s3(&format!("part_size_bytes: {MAX}")), ""),
            format!("{sink_at}.part_size_bytes"),
            "5242880",
        ),
        (bounded_case("", &s3(&format!("timeout_secs: {MAX}")), ""), format!("{sink_at}.timeout_secs"), "1..=3600"),
    ];
    for (text, field, range) in &cases {
        let error = error_text(text);
        assert!(error.contains(field.as_str()), "the error names {field}: {error}\n{text}");
        assert!(error.contains(range), "the error gives the range {range}: {error}\n{text}");
    }
    // The limits themselves are allowed.
    let edges = [
        pipeline("batch: { max_inflight: 1024, max_events: 1000000, max_bytes: 1073741824, max_ms: 3600000 }"),
        pipeline("dead_letter: { max_entries: 100000000 }"),
        generator(&format!("rows_per_tx: 1000000, events_per_sec: 100000000, seed: {MAX}")),
        bounded_case("", &redis("maxlen: 9223372036854775807"), ""),
    ];
    for text in &edges {
        check(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}

#[test]
fn two_sinks_writing_one_target_are_refused_naming_both() {
    let two = |first: &str, second: &str| {
        format!(
            "pipelines:\n  - name: a\n    source: {{ type: generator, config: {{ id: g1 }} }}\n    sinks: [ {first} ]\n  - name: b\n    source: {{ type: generator, config: {{ id: g2 }} }}\n    sinks: [ {second} ]\n"
        )
    };
    let file = |id: &str, path: &str| format!("{{ type: file, config: {{ id: {id}, path: {path} }} }}");
    let message = error_text(&two(&file("x1", "out/x.jsonl"), &file("x2", "./out/x.jsonl")));
    assert!(message.contains("pipelines[1].sinks[0].config"), "{message}");
    assert!(message.contains("sink \"x2\" of pipeline \"b\""), "{message}");
    assert!(message.contains("sink \"x1\" of pipeline \"a\""), "{message}");
    assert!(message.contains("the file out/x.jsonl"), "{message}");
    let same_pipeline = EXAMPLE.replace(
        "config: { id: local, path: ./out/orders.jsonl, required: true }",
        "config: { id: local, path: ./out/orders.jsonl, required: true }\n      - type: file\n        config: { id: again, path: out/sub/../orders.jsonl }",
    );
    assert!(error_text(&same_pipeline).contains("sink \"again\" of pipeline \"orders\""));

    let refused = [
        (
            "{ type: s3, config: { id: s1, bucket: bkt, prefix: cdc, endpoint: \"http://S3:9000\" } }",
            "{ type: s3, config: { id: s2, bucket: bkt, prefix: cdc/orders/, endpoint: \"http://s3:9000/\" } }",
            "bucket \"bkt\"",
        ),
        (
            "{ type: s3, config: { id: s1, local: lake } }",
            "{ type: s3, config: { id: s2, local: ./lake/, prefix: p } }",
            "the folder lake",
        ),
        (
            "{ type: redis, config: { id: r1, url: \"redis://:pw@r:6379/0\", stream: s } }",
            "{ type: redis, config: { id: r2, url: \"redis://r\", stream: s } }",
            "Redis stream \"s\" on r:6379/0",
        ),
        (
            "{ type: nats, config: { id: n1, url: \"nats://n1,nats://n2\", stream: st } }",
            "{ type: nats, config: { id: n2, url: \"nats://n2:4222\", stream: st, exclusive: false } }",
            "NATS stream \"st\"",
        ),
        (
            "{ type: kafka, config: { id: k1, brokers: \"k1:9092,k2:9092\", topic: t } }",
            "{ type: kafka, config: { id: k2, brokers: \"k2\", topic: t } }",
            "Kafka topic \"t\"",
        ),
    ];
    for (first, second, target) in refused {
        let message = error_text(&two(first, second));
        assert!(message.contains(target) && message.contains("writes too"), "{message}\n{first}\n{second}");
    }
    let allowed = [
        (file("x1", "out/x.jsonl"), file("x2", "out/y.jsonl")),
        (
            "{ type: s3, config: { id: s1, bucket: bkt, prefix: cdc/a } }".into(),
            "{ type: s3, config: { id: s2, bucket: bkt, prefix: cdc/ab } }".into(),
        ),
        (
            "{ type: s3, config: { id: s1, bucket: bkt, prefix: p } }".into(),
            "{ type: s3, config: { id: s2, bucket: bkt, prefix: p, endpoint: \"http://other:9000\" } }".into(),
        ),
        (
            "{ type: redis, config: { id: r1, url: \"redis://r/0\", stream: s } }".into(),
            "{ type: redis, config: { id: r2, url: \"redis://r/1\", stream: s } }".into(),
        ),
        (
            "{ type: nats, config: { id: n1, url: \"nats://n1\", stream: st, exclusive: false } }".into(),
            "{ type: nats, config: { id: n2, url: \"nats://n1\", stream: st, exclusive: false } }".into(),
        ),
        (
            "{ type: kafka, config: { id: k1, brokers: \"k1\", topic: t } }".into(),
            "{ type: kafka, config: { id: k2, brokers: \"other\", topic: t } }".into(),
        ),
    ];
    for (first, second) in allowed {
        check(&two(&first, &second)).unwrap_or_else(|e| panic!("{e}\n{first}\n{second}"));
    }
}
