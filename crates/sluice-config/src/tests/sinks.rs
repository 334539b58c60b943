//! Sink configs read through the registry, and the shared-target rule.

use super::*;

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
    let telemetry = check(
        &format!("{HTTP}      - type: file\n        config: {{ id: all, path: out.jsonl }}\n")
            .replace("id: hook,", "id: hook, required: false, delivery: at_most_once,"),
    )
    .unwrap();
    assert_eq!(telemetry.pipelines[0].sinks[0].guarantee().to_string(), "at-most-once (dropped events counted)");
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
        (HTTP.replace("id: hook,", "id: hook, delivery: at_most_once,"), "config.delivery"),
        (HTTP.replace("id: hook,", "id: hook, delivery: sometimes,"), "unknown variant `sometimes`"),
        (HTTP.replace("id: hook,", "id: hook, signature_header: \"x y\","), "config.signature_header"),
        (
            HTTP.replace("id: hook,", "id: hook, mode: batch, format: { envelope: cloudevents, mode: binary },"),
            "config.format.mode",
        ),
        (
            HTTP.replace("id: hook,", "id: hook, format: { envelope: debezium, tombstones: true },"),
            "config.format.tombstones",
        ),
        (
            HTTP.replace(
                "id: hook,",
                "id: hook, mode: batch, format: { envelope: debezium, encoding: avro, schema_registry: { url: \"http://127.0.0.1:1\" } },",
            ),
            "config.mode",
        ),
        (
            HTTP.replace("Authorization", "ce-id")
                .replace("id: hook,", "id: hook, format: { envelope: cloudevents, mode: binary },"),
            "config.headers.ce-id",
        ),
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
    assert_eq!(s3.format.file, FileFormat::Parquet);
    assert_eq!(s3.compression(), Compression::Snappy);
    assert_eq!(s3.max_file_bytes, DEFAULT_S3_MAX_FILE_BYTES);
    assert_eq!(s3.max_file_age_secs, DEFAULT_S3_MAX_FILE_AGE_SECS);
    assert_eq!(s3.part_size_bytes, DEFAULT_S3_PART_SIZE_BYTES);
    assert_eq!(sink.guarantee().to_string(), "exactly-once (at file level; one pipeline per sink and prefix)");
    let debug = format!("{config:?}");
    assert!(!debug.contains("hush") && !debug.contains("AKIA"), "{debug}");
    let local = check(&S3.replace(
        "bucket: my-lake, prefix: cdc/orders, secret_access_key: \"hush\", access_key_id: AKIA",
        "local: ./lake, format: jsonl",
    ))
    .unwrap();
    let SinkConfig::S3(local) = &local.pipelines[0].sinks[0] else { panic!("s3 expected") };
    assert_eq!(local.compression(), Compression::None);
    let block = check(
        &S3.replace("prefix: cdc/orders", "prefix: cdc, format: { file: jsonl, envelope: debezium, schemas: true }"),
    )
    .unwrap();
    let SinkConfig::S3(block) = &block.pipelines[0].sinks[0] else { panic!("s3 expected") };
    assert_eq!(block.format.file, FileFormat::Jsonl);
    assert_eq!(block.format.envelope.envelope_name(), "debezium");
    assert_eq!(block.format.envelope.schemas, Some(true));
    let avro = check(&S3.replace("prefix: cdc/orders", "prefix: cdc, format: avro")).unwrap();
    let SinkConfig::S3(avro) = &avro.pipelines[0].sinks[0] else { panic!("s3 expected") };
    assert_eq!(avro.format.file, FileFormat::Avro);
    assert_eq!(avro.compression(), Compression::Snappy);
    assert_eq!(avro.format.envelope.envelope_name(), "debezium");
    assert!(avro.format.envelope.is_avro());
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
        (
            S3.replace("prefix: cdc/orders", "prefix: cdc, format: { file: parquet, envelope: debezium }"),
            "config.format.envelope",
        ),
        (
            S3.replace("prefix: cdc/orders", "prefix: cdc, format: { envelope: debezium, schema: true }"),
            "unknown field `schema`",
        ),
        (
            S3.replace("prefix: cdc/orders", "prefix: cdc, format: { envelope: native, mode: binary }"),
            "config.format.mode",
        ),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, format: avro, compression: gzip"), "config.compression"),
        (S3.replace("prefix: cdc/orders", "prefix: cdc, required: false, delivery: at_most_once"), "config.delivery"),
        (
            S3.replace(
                "prefix: cdc/orders",
                "prefix: cdc, format: { file: avro, schema_registry: { url: \"http://r\" } }",
            ),
            "config.format.schema_registry",
        ),
        (
            S3.replace("prefix: cdc/orders", "prefix: cdc, format: { file: avro, transaction_metadata: true }"),
            "config.format.transaction_metadata",
        ),
        (
            S3.replace("prefix: cdc/orders", "prefix: cdc, format: { file: avro, encoding: json }"),
            "config.format.encoding",
        ),
        (
            S3.replace("prefix: cdc/orders", "prefix: cdc, format: { file: avro, envelope: cloudevents }"),
            "config.format.encoding",
        ),
        (
            S3.replace(
                "prefix: cdc/orders",
                "prefix: cdc, format: { file: jsonl, envelope: debezium, encoding: avro }",
            ),
            "config.format.encoding",
        ),
    ];
    for (text, field) in cases {
        let message = error_text(&text);
        assert!(message.contains(field), "expected {field} in {message}");
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
