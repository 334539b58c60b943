//! Every numeric setting has a range, and its error names field and range.

use super::*;

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
            database_case("postgres", "failover_hosts: [\"db-b:5432\", \"db-c:99999\"]"),
            format!("{source_at}.failover_hosts[1]"),
            "is not host or host:port",
        ),
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
