//! The registry client against a real registry: Apicurio Registry (from
//! Maven Central, started by scripts/services.sh) through its
//! Confluent-compatible API.

use sluice_registry::{Registry, RegistryConfig, RegistryError};

fn url() -> String {
    std::env::var("SLUICE_TEST_REGISTRY_URL")
        .expect("SLUICE_TEST_REGISTRY_URL is not set: run `scripts/services.sh start` and source its env file")
}

fn subject(name: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{name}-{}x{nanos}-value", std::process::id())
}

fn record(fields: &str) -> String {
    format!(r#"{{"type":"record","name":"Value","namespace":"shop.public.orders","fields":[{fields}]}}"#)
}

const ID: &str = r#"{"name":"id","type":"int"}"#;

#[tokio::test]
async fn a_schema_is_registered_once_and_found_again() {
    let registry = Registry::new(&RegistryConfig::at(url())).unwrap();
    let subject = subject("once");
    let schema = record(ID);
    assert_eq!(registry.lookup(&subject, &schema).await.unwrap(), None, "a new subject holds nothing");
    let id = registry.register(&subject, &schema).await.unwrap();
    assert_eq!(registry.register(&subject, &schema).await.unwrap(), id);
    // A second client asks the registry rather than its own cache.
    let other = Registry::new(&RegistryConfig::at(url())).unwrap();
    assert_eq!(other.lookup(&subject, &schema).await.unwrap(), Some(id));
    assert_eq!(other.register(&subject, &schema).await.unwrap(), id, "registering again gives the same id");
    let stored: serde_json::Value = serde_json::from_str(&other.schema(id).await.unwrap()).unwrap();
    assert_eq!(stored["fields"][0]["name"], "id");
}

#[tokio::test]
async fn compatibility_follows_the_subjects_level() {
    let registry = Registry::new(&RegistryConfig::at(url())).unwrap();
    let subject = subject("compat");
    let added_required = record(&format!(r#"{ID},{{"name":"note","type":"string"}}"#));
    assert!(
        registry.is_compatible(&subject, &added_required).await.unwrap(),
        "a subject without versions takes anything"
    );
    registry.register(&subject, &record(ID)).await.unwrap();
    let client = reqwest::Client::new();
    let answer = client
        .put(format!("{}/config/{subject}", url()))
        .header("Content-Type", "application/vnd.schemaregistry.v1+json")
        .body(r#"{"compatibility":"BACKWARD"}"#)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.text().await.unwrap());
    assert_eq!(registry.compatibility(&subject).await.unwrap(), "BACKWARD");
    assert!(!registry.is_compatible(&subject, &added_required).await.unwrap(), "a new required field breaks old data");
    let added_optional = record(&format!(r#"{ID},{{"name":"note","type":["null","string"],"default":null}}"#));
    assert!(registry.is_compatible(&subject, &added_optional).await.unwrap());
    match registry.register(&subject, &added_required).await {
        Err(RegistryError::Refused { status: 409, message, .. }) => assert!(!message.is_empty()),
        other => panic!("an incompatible schema was not refused: {other:?}"),
    }
    let second = registry.register(&subject, &added_optional).await.unwrap();
    assert_ne!(second, registry.register(&subject, &record(ID)).await.unwrap());
}

#[tokio::test]
async fn an_unreachable_registry_is_a_transient_error_naming_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut config = RegistryConfig::at(format!("http://user:hush@127.0.0.1:{port}/apis/ccompat/v7"));
    config.timeout_secs = 2;
    let registry = Registry::new(&config).unwrap();
    let error = registry.register("s-value", &record(ID)).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    let text = error.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("hush"), "the password is in the message: {text}");
}
