//! The `kafka` sink's config.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One topic per table: `<database>.<table>`.
pub const DEFAULT_KAFKA_TOPIC: &str = "${db}.${table}";
/// Where exactly-once sinks keep their positions (a compacted topic).
pub const DEFAULT_KAFKA_CHECKPOINT_TOPIC: &str = "sluice_checkpoints";
/// lz4 compresses JSON well at little CPU cost.
pub const DEFAULT_KAFKA_COMPRESSION: KafkaCompression = KafkaCompression::Lz4;
/// Limit on delivering a batch and on each transaction step (s).
pub const DEFAULT_KAFKA_TIMEOUT_SECS: u64 = 30;

/// librdkafka settings Sluice sets itself; `client_conf` may not change them.
pub const KAFKA_MANAGED_SETTINGS: [&str; 6] =
    ["bootstrap.servers", "enable.idempotence", "acks", "transactional.id", "compression.type", "isolation.level"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KafkaCompression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl KafkaCompression {
    pub fn as_str(self) -> &'static str {
        match self {
            KafkaCompression::None => "none",
            KafkaCompression::Gzip => "gzip",
            KafkaCompression::Snappy => "snappy",
            KafkaCompression::Lz4 => "lz4",
            KafkaCompression::Zstd => "zstd",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    pub id: String,
    #[serde(default = "crate::pipeline::default_required")]
    pub required: bool,
    /// `host:port[,host:port...]`.
    pub brokers: String,
    /// Placeholders: `${db}`, `${table}`, `${op}`, `${key.<column>}`.
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Message key template; absent means the row's primary key as JSON.
    pub key: Option<String>,
    #[serde(default)]
    pub exactly_once: bool,
    #[serde(default = "default_checkpoint_topic")]
    pub checkpoint_topic: String,
    /// Default: `sluice-<pipeline>-<sink id>`.
    pub transactional_id: Option<String>,
    #[serde(default = "default_compression")]
    pub compression: KafkaCompression,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Passed to librdkafka as is (except the settings Sluice manages).
    #[serde(default)]
    pub client_conf: BTreeMap<String, String>,
}

fn default_topic() -> String {
    DEFAULT_KAFKA_TOPIC.to_string()
}
fn default_checkpoint_topic() -> String {
    DEFAULT_KAFKA_CHECKPOINT_TOPIC.to_string()
}
fn default_compression() -> KafkaCompression {
    DEFAULT_KAFKA_COMPRESSION
}
fn default_timeout() -> u64 {
    DEFAULT_KAFKA_TIMEOUT_SECS
}

/// The placeholders a topic or key template may use.
pub fn check_template(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("`${{` without a closing `}}` in {template:?}"))?;
        let name = &after[..end];
        let known = matches!(name, "db" | "table" | "op") || name.strip_prefix("key.").is_some_and(|c| !c.is_empty());
        if !known {
            return Err(format!(
                "unknown placeholder ${{{name}}}; use ${{db}}, ${{table}}, ${{op}} or ${{key.<column>}}"
            ));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}

/// Kafka's rule for topic names.
pub fn valid_topic(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}
