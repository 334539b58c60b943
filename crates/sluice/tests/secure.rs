//! Servers that want TLS and authentication, as managed services do: Kafka
//! on a SASL_SSL listener with a SCRAM user and with OAUTHBEARER tokens
//! from an identity provider, Redis over TLS with an ACL
//! user and a client certificate, NATS over TLS with a client certificate
//! and a user and password or an NKey,
//! a webhook that asks for a client certificate.
//! Each run is checked event by event against what the generator wrote.
//! `sluice validate` refuses the settings this build cannot honour.

mod common;

use std::time::Duration;

use common::*;

const TX_COUNT: u64 = 200;

fn generator_with(id: &str, sink: &str) -> String {
    format!(
        "pipelines:\n  - name: {id}\n    source: {{ type: generator, config: {{ id: {id}, tx_count: {TX_COUNT}, rows_per_tx: 10 }} }}\n    sinks:\n{sink}"
    )
}

fn assert_exactly_every_event(positions: Vec<String>) {
    assert_each_once(&positions, &generator_positions(TX_COUNT, 10), "the sink");
}

fn run_to_the_end(dir: &std::path::Path, config: &str) {
    let config = write_config(dir, config);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir);
    assert!(output.status.success(), "{}", stderr(&output));
}

/// Runs `config` in `dir`, which must fail: a refused login delivers
/// nothing. Its stderr and log.
fn refused_run(dir: &std::path::Path, config: &str) -> String {
    let config = write_config(dir, config);
    let output = run(&["run", "-c", config.to_str().unwrap()], dir);
    let log = format!("{}{}", stderr(&output), std::fs::read_to_string(dir.join("sluice.log")).unwrap_or_default());
    assert!(!output.status.success(), "a refused login delivers nothing:\n{log}");
    log
}

fn kafka_positions(topic: &str) -> Vec<String> {
    kafka_partition_positions(topic, "sluice-secure-test").into_iter().map(|(_, position)| position).collect()
}

fn kafka_sink(topic: &str, password: &str) -> String {
    format!(
        "      - type: kafka\n        config:\n          id: k\n          brokers: {}\n          topic: {topic}\n          exactly_once: true\n          timeout_secs: 15\n          tls: {{ ca_file: {} }}\n          sasl: {{ mechanism: SCRAM-SHA-512, username: {}, password: \"{password}\" }}\n",
        env("SLUICE_TEST_KAFKA_SASL_SSL_BROKERS"),
        env("SLUICE_TEST_TLS_CA"),
        env("SLUICE_TEST_KAFKA_SASL_USER"),
    )
}

/// A Kafka sink that logs in with OAUTHBEARER, its token from the test
/// issuer, which the broker checks against the issuer's key set.
fn oauth_sink(topic: &str, secret: &str) -> String {
    format!(
        "      - type: kafka\n        config:\n          id: k\n          brokers: {}\n          topic: {topic}\n          exactly_once: true\n          timeout_secs: 15\n          tls: {{ ca_file: {} }}\n          sasl: {{ mechanism: OAUTHBEARER, token_endpoint_url: \"{}\", client_id: {}, client_secret: \"{secret}\", scope: kafka }}\n",
        env("SLUICE_TEST_KAFKA_SASL_SSL_BROKERS"),
        env("SLUICE_TEST_TLS_CA"),
        env("SLUICE_TEST_OIDC_TOKEN_URL"),
        env("SLUICE_TEST_OIDC_CLIENT_ID"),
    )
}

#[test]
fn kafka_with_an_oauthbearer_token_from_an_identity_provider_gets_every_event_once() {
    let id = unique("oauthkafka");
    let dir = tempfile::tempdir().unwrap();
    let sink = oauth_sink(&id, "${SLUICE_TEST_OIDC_CLIENT_SECRET}");
    run_to_the_end(dir.path(), &generator_with(&id, &sink));
    assert_exactly_every_event(kafka_positions(&id));
}

#[test]
fn a_client_secret_the_identity_provider_refuses_stops_the_run_with_the_reason_and_no_secret() {
    let id = unique("oauthkafkabad");
    let dir = tempfile::tempdir().unwrap();
    let log = refused_run(dir.path(), &generator_with(&id, &oauth_sink(&id, "not-the-client-secret")));
    assert!(log.contains("sasl.client_secret"), "the fix names the fields to check:\n{log}");
    assert!(!log.contains("not-the-client-secret"), "the secret stays out of the log");
}

#[test]
fn kafka_on_a_sasl_ssl_listener_with_a_scram_user_gets_every_event_once() {
    let id = unique("seckafka");
    let dir = tempfile::tempdir().unwrap();
    let sink = kafka_sink(&id, "${SLUICE_TEST_KAFKA_SASL_PASSWORD}");
    run_to_the_end(dir.path(), &generator_with(&id, &sink));
    assert_exactly_every_event(kafka_positions(&id));
}

#[test]
fn a_wrong_kafka_password_stops_the_run_with_the_reason_and_no_secret() {
    let id = unique("seckafkabad");
    let dir = tempfile::tempdir().unwrap();
    let log = refused_run(dir.path(), &generator_with(&id, &kafka_sink(&id, "not-the-password")));
    assert!(log.to_lowercase().contains("authentication"), "the reason is named:\n{log}");
    assert!(!log.contains("not-the-password"), "the password stays out of the log");
}

#[test]
fn redis_over_tls_with_an_acl_user_and_a_client_certificate_gets_every_event_once() {
    let id = unique("secredis");
    let dir = tempfile::tempdir().unwrap();
    let sink = format!(
        "      - type: redis\n        config: {{ id: r, url: \"{}\", password: \"${{SLUICE_TEST_REDIS_ACL_PASSWORD}}\", stream: \"{id}.${{table}}\", ca_file: {}, cert_file: {}, key_file: {} }}\n",
        env("SLUICE_TEST_REDIS_TLS_URL"),
        env("SLUICE_TEST_TLS_CA"),
        env("SLUICE_TEST_TLS_CLIENT_CERT"),
        env("SLUICE_TEST_TLS_CLIENT_KEY"),
    );
    run_to_the_end(dir.path(), &generator_with(&id, &sink));
    assert_exactly_every_event(redis_positions(&format!("{id}.orders")));
}

#[test]
fn a_redis_tls_server_refuses_a_wrong_ca_and_the_run_says_why() {
    let id = unique("secredisca");
    let dir = tempfile::tempdir().unwrap();
    // Any CA but the one that signed the server's certificate.
    let sink = format!(
        "      - type: redis\n        config: {{ id: r, url: \"{}\", password: \"${{SLUICE_TEST_REDIS_ACL_PASSWORD}}\", stream: \"{id}.${{table}}\", ca_file: {}, timeout_secs: 2 }}\n    sink_batch_deadline_secs: 5\n    slo: {{ max_failing_secs: 1 }}\n",
        env("SLUICE_TEST_REDIS_TLS_URL"),
        env("SLUICE_TEST_PG_CA"),
    );
    let config = write_config(dir.path(), &generator_with(&id, &sink));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_until(Duration::from_secs(60), "the certificate refusal in the log", || {
        std::fs::read_to_string(dir.path().join("sluice.log"))
            .unwrap_or_default()
            .to_lowercase()
            .contains("certificate")
    });
    drop(child);
    assert!(redis_positions(&format!("{id}.orders")).is_empty(), "nothing reached an unverified server");
}

/// Every `Sluice-Position` of a stream on the NATS server that wants TLS
/// and a login.
fn secure_nats_positions(stream: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let ca = std::path::PathBuf::from(env("SLUICE_TEST_TLS_CA"));
        let client = async_nats::ConnectOptions::with_user_and_password(
            env("SLUICE_TEST_NATS_USER"),
            env("SLUICE_TEST_NATS_PASSWORD"),
        )
        .add_root_certificates(ca)
        .add_client_certificate(env("SLUICE_TEST_TLS_CLIENT_CERT").into(), env("SLUICE_TEST_TLS_CLIENT_KEY").into())
        .require_tls(true)
        .connect(env("SLUICE_TEST_NATS_TLS_URL"))
        .await
        .unwrap();
        let context = async_nats::jetstream::new(client);
        let mut handle = context.get_stream(stream).await.unwrap();
        let last = handle.info().await.unwrap().state.last_sequence;
        let mut positions = Vec::new();
        for sequence in 1..=last {
            let message = handle.get_raw_message(sequence).await.unwrap();
            positions.push(message.headers.get("Sluice-Position").unwrap().as_str().to_string());
        }
        positions
    })
}

/// A NATS sink on the server that verifies client certificates, logged
/// in with `auth`.
fn secure_nats_sink(id: &str, auth: &str) -> String {
    format!(
        "      - type: nats\n        config: {{ id: n, url: \"{}\", subject: \"{id}.${{table}}\", stream: {id}, {auth}, ca_file: {}, cert_file: {}, key_file: {} }}\n",
        env("SLUICE_TEST_NATS_TLS_URL"),
        env("SLUICE_TEST_TLS_CA"),
        env("SLUICE_TEST_TLS_CLIENT_CERT"),
        env("SLUICE_TEST_TLS_CLIENT_KEY"),
    )
}

#[test]
fn nats_over_tls_with_a_client_certificate_and_a_user_and_password_gets_every_event_once() {
    let id = unique("secnats");
    let dir = tempfile::tempdir().unwrap();
    let auth = format!("user: {}, password: \"${{SLUICE_TEST_NATS_PASSWORD}}\"", env("SLUICE_TEST_NATS_USER"));
    run_to_the_end(dir.path(), &generator_with(&id, &secure_nats_sink(&id, &auth)));
    assert_exactly_every_event(secure_nats_positions(&id));
}

#[test]
fn nats_with_an_nkey_gets_every_event_once_and_a_client_without_a_certificate_is_refused() {
    let id = unique("nkeynats");
    let dir = tempfile::tempdir().unwrap();
    let sink = secure_nats_sink(&id, "nkey: \"${SLUICE_TEST_NATS_NKEY_SEED}\"");
    run_to_the_end(dir.path(), &generator_with(&id, &sink));
    assert_exactly_every_event(secure_nats_positions(&id));

    let without_cert = format!(
        "      - type: nats\n        config: {{ id: n, url: \"{}\", subject: \"x.y\", stream: {id}, nkey: \"${{SLUICE_TEST_NATS_NKEY_SEED}}\", ca_file: {} }}\n",
        env("SLUICE_TEST_NATS_TLS_URL"),
        env("SLUICE_TEST_TLS_CA"),
    );
    let config = write_config(dir.path(), &generator_with(&id, &without_cert));
    let output = run(&["validate", "--connect", "-c", config.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(text.contains("FAIL  server"), "{text}");
    assert!(!text.contains(&env("SLUICE_TEST_NATS_NKEY_SEED")), "the seed is never shown: {text}");
}

#[test]
fn validate_refuses_security_settings_this_build_cannot_honour() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "      - { type: kafka, config: { id: k, brokers: \"127.0.0.1:1\", client_conf: { sasl.mechanism: GSSAPI } } }\n",
            "pipelines[0].sinks[0].config.client_conf.sasl.mechanism",
        ),
        (
            "      - { type: kafka, config: { id: k, brokers: \"127.0.0.1:1\", client_conf: { sasl.kerberos.service.name: kafka } } }\n",
            "no Kerberos",
        ),
        (
            "      - { type: kafka, config: { id: k, brokers: \"127.0.0.1:1\", sasl: { mechanism: GSSAPI, username: u, password: p } } }\n",
            "GSSAPI",
        ),
        (
            "      - { type: kafka, config: { id: k, brokers: \"127.0.0.1:1\", sasl: { mechanism: OAUTHBEARER, client_id: c, client_secret: s } } }\n",
            "pipelines[0].sinks[0].config.sasl.token_endpoint_url",
        ),
        (
            "      - { type: redis, config: { id: r, url: \"redis://127.0.0.1:1\", ca_file: /etc/hostname } }\n",
            "not rediss://",
        ),
        (
            "      - { type: kafka, config: { id: k, brokers: \"127.0.0.1:1\", tls: { ca_file: /nonexistent/ca.pem } } }\n",
            "tls.ca_file",
        ),
    ];
    for (sink, named) in cases {
        let config = write_config(dir.path(), &generator_with("v", sink));
        let output = run(&["validate", "-c", config.to_str().unwrap()], dir.path());
        assert_eq!(output.status.code(), Some(2), "{sink}: {}", stderr(&output));
        assert!(stderr(&output).contains(named), "{sink}: the error names {named}:\n{}", stderr(&output));
    }
}

#[test]
fn s3_keys_come_from_the_named_profile_of_the_shared_credentials_file() {
    let id = unique("secs3");
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::write(
        &credentials,
        format!(
            "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[sluice]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            env("SLUICE_TEST_S3_ACCESS_KEY"),
            env("SLUICE_TEST_S3_SECRET_KEY")
        ),
    )
    .unwrap();
    // No keys in the config: they come from the profile AWS_PROFILE names.
    let sink = format!(
        "      - type: s3\n        config: {{ id: lake, bucket: {}, endpoint: \"{}\", path_style: true, prefix: {id}, format: jsonl, timeout_secs: 10 }}\n",
        env("SLUICE_TEST_S3_BUCKET"),
        env("SLUICE_TEST_S3_ENDPOINT"),
    );
    let config = write_config(dir.path(), &generator_with(&id, &sink));
    let credentials = credentials.to_str().unwrap();
    let profile_env = [("AWS_SHARED_CREDENTIALS_FILE", credentials), ("AWS_PROFILE", "sluice")];
    let mut child = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &profile_env);
    let status = child.wait_exit(Duration::from_secs(120));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(status.success(), "{log}");
    common::lake::assert_exactly_once(&common::lake::s3_files(&id), "lake", &generator_positions(TX_COUNT, 10));

    // A profile that is not in the file is a clear error, not a guess.
    let missing = [("AWS_SHARED_CREDENTIALS_FILE", credentials), ("AWS_PROFILE", "nope")];
    let mut child = spawn_with_env(&["run", "-c", config.to_str().unwrap()], dir.path(), &missing);
    let status = child.wait_exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.path().join("sluice.log")).unwrap_or_default();
    assert!(!status.success());
    assert!(log.contains("AWS_PROFILE names profile \"nope\""), "{log}");
}

/// An HTTPS receiver (Python's `ssl`) that refuses clients without a
/// certificate from the test CA; killed when dropped.
struct MtlsReceiver {
    child: std::process::Child,
    url: String,
    out: std::path::PathBuf,
}

impl MtlsReceiver {
    fn start(dir: &std::path::Path) -> Self {
        let ca = std::path::PathBuf::from(env("SLUICE_TEST_TLS_CA"));
        let (port_file, out) = (dir.join("receiver.port"), dir.join("received.jsonl"));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mtls_receiver.py");
        let child = std::process::Command::new("python3")
            .arg(script)
            .args([&port_file, &ca.with_file_name("server.crt"), &ca.with_file_name("server.key"), &ca, &out])
            .spawn()
            .expect("python3 runs");
        wait_until(Duration::from_secs(30), "the HTTPS receiver to listen", || port_file.exists());
        let port = std::fs::read_to_string(&port_file).unwrap();
        Self { child, url: format!("https://127.0.0.1:{port}/in"), out }
    }

    /// Every event position the receiver was sent, in arrival order.
    fn positions(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter(|l| !l.is_empty())
            // One event per request in single mode, an array in batch mode.
            .flat_map(|l| match serde_json::from_str::<serde_json::Value>(l).unwrap() {
                serde_json::Value::Array(events) => events,
                event => vec![event],
            })
            .map(|e| e["position"].as_str().unwrap().to_string())
            .collect()
    }
}

impl Drop for MtlsReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_webhook_that_asks_for_a_client_certificate_gets_every_event_and_refuses_a_client_without_one() {
    let id = unique("mtls");
    let dir = tempfile::tempdir().unwrap();
    let receiver = MtlsReceiver::start(dir.path());
    let tls = format!(
        "ca_file: {}, cert_file: {}, key_file: {}",
        env("SLUICE_TEST_TLS_CA"),
        env("SLUICE_TEST_TLS_CLIENT_CERT"),
        env("SLUICE_TEST_TLS_CLIENT_KEY")
    );
    let with_cert = format!("      - {{ type: http, config: {{ id: hook, url: \"{}\", {tls} }} }}\n", receiver.url);
    run_to_the_end(dir.path(), &generator_with(&id, &with_cert));
    let positions = receiver.positions();
    assert_exactly_every_event(positions);

    let without = format!(
        "      - {{ type: http, config: {{ id: hook, url: \"{}\", ca_file: {} }} }}\n",
        receiver.url,
        env("SLUICE_TEST_TLS_CA")
    );
    let config = write_config(dir.path(), &generator_with(&id, &without));
    let output = run(&["validate", "--connect", "-c", config.to_str().unwrap()], dir.path());
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(text.contains("FAIL  receiver"), "the receiver refused the client without a certificate: {text}");
}
