//! Source configs: defaults, secrets and the rules that name a field.

use super::*;

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
