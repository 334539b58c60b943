//! The `kafka` sink's config.

use std::collections::BTreeMap;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, check_seconds, check_template, check_topic_template, valid_topic};

pub use super::security::{KafkaSasl, KafkaSaslMechanism, KafkaTls};
use crate::registry::SinkSettings;
use crate::target::{Target, servers};

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

/// How the sink avoids duplicates, if it does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExactlyOnce {
    /// At-least-once: the idempotent producer, and replays after a crash.
    #[default]
    Off,
    /// Each write (a batch, or the batches queued behind the last
    /// commit), and its checkpoint, in one Kafka transaction.
    Transactions,
    /// Each partition's last record read back on start, and every replayed
    /// record at or below it skipped.
    ReadBack,
}

/// `exactly_once: false | true | read_back`.
impl<'de> Deserialize<'de> for ExactlyOnce {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Flag(bool),
            Mode(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Flag(false) => Ok(ExactlyOnce::Off),
            Raw::Flag(true) => Ok(ExactlyOnce::Transactions),
            Raw::Mode(mode) if mode == "read_back" => Ok(ExactlyOnce::ReadBack),
            Raw::Mode(other) => Err(serde::de::Error::custom(format!(
                "exactly_once: expected true, false or read_back, found {other:?}"
            ))),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    pub id: String,
    #[serde(default = "crate::registry::default_required")]
    pub required: bool,
    /// This sink's buffer limits (`buffer.max_memory_bytes`, `buffer.max_disk_bytes`).
    #[serde(default)]
    pub buffer: crate::BufferConfig,
    /// `at_least_once` (default) or `at_most_once` (optional sinks only).
    #[serde(default)]
    pub delivery: crate::Delivery,
    /// This sink's own transforms, run in its writer after the pipeline's.
    #[serde(default)]
    pub transforms: Vec<sluice_transform::TransformConfig>,
    /// `host:port[,host:port...]`.
    pub brokers: String,
    /// Placeholders: `${db}`, `${table}`, `${op}`, `${key.<column>}`.
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Message key template; absent means the row's primary key as JSON.
    pub key: Option<String>,
    /// `false` (at-least-once), `true` (transactions) or `read_back`.
    #[serde(default)]
    pub exactly_once: ExactlyOnce,
    #[serde(default = "default_checkpoint_topic")]
    pub checkpoint_topic: String,
    /// Default: `sluice-<pipeline>-<sink id>`.
    pub transactional_id: Option<String>,
    #[serde(default = "default_compression")]
    pub compression: KafkaCompression,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// TLS to the brokers; absent: plaintext.
    pub tls: Option<KafkaTls>,
    /// SASL authentication (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    pub sasl: Option<KafkaSasl>,
    /// Passed to librdkafka as is (except the settings Sluice manages).
    #[serde(default)]
    pub client_conf: BTreeMap<String, String>,
    /// The envelope of message values and keys (`format.envelope`).
    #[serde(default)]
    pub format: sluice_format::FormatConfig,
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

impl KafkaSinkConfig {
    /// Whether each write is a Kafka transaction.
    pub fn transactions(&self) -> bool {
        self.exactly_once == ExactlyOnce::Transactions
    }

    pub fn reads_back(&self) -> bool {
        self.exactly_once == ExactlyOnce::ReadBack
    }

    /// Messages have keys and headers.
    pub const CARRIER: sluice_format::Carrier = sluice_format::Carrier { name: "kafka", keys: true, headers: sluice_format::Headers::Kafka, avro: if cfg!(feature = "avro") { sluice_format::AvroSupport::Registry } else { sluice_format::AvroSupport::None } };
}

impl SinkSettings for KafkaSinkConfig {
    fn guarantee(&self) -> Guarantee {
        match self.exactly_once {
            ExactlyOnce::Transactions => Guarantee::ExactlyOnce { condition: Some("read_committed consumers") },
            ExactlyOnce::ReadBack => Guarantee::ExactlyOnce {
                condition: Some("topics written only by this sink, whose partition counts stay as they are"),
            },
            ExactlyOnce::Off => Guarantee::AtLeastOnce { dedup: "event id header" },
        }
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        if c.brokers.trim().is_empty() {
            return Err(Invalid::new(format!("{at}.brokers"), "is empty", "list the brokers as host:port[,host:port]"));
        }
        check_topic_template(&c.topic).map_err(|problem| {
            Invalid::new(
                format!("{at}.topic"),
                problem,
                "use ${db}, ${table}, ${op}, ${key.<column>} and a-z, A-Z, 0-9, '.', '_' and '-'",
            )
        })?;
        if let Some(key) = &c.key {
            check_template(key).map_err(|problem| Invalid::new(format!("{at}.key"), problem, "fix the key template"))?;
        }
        c.format.validate(at, Self::CARRIER)?;
        if c.key.is_some() && c.format.envelope == sluice_format::Envelope::Debezium {
            return Err(Invalid::new(
                format!("{at}.key"),
                "the Debezium envelope sets each message's key (the primary key struct)",
                "remove key, or use the native or cloudevents envelope",
            ));
        }
        if !valid_topic(&c.checkpoint_topic) {
            return Err(Invalid::new(
                format!("{at}.checkpoint_topic"),
                format!("{:?} is not a valid Kafka topic name", c.checkpoint_topic),
                "use 1 to 249 characters from a-z, A-Z, 0-9, '.', '_' and '-'",
            ));
        }
        if let Some(managed) = c.client_conf.keys().find(|k| KAFKA_MANAGED_SETTINGS.contains(&k.as_str())) {
            return Err(Invalid::new(
                format!("{at}.client_conf.{managed}"),
                "is set by Sluice and may not be overridden",
                "use brokers, exactly_once, transactional_id or compression instead",
            ));
        }
        let keys: Vec<&str> = c.client_conf.keys().map(String::as_str).collect();
        super::security::validate(at, c.tls.as_ref(), c.sasl.as_ref(), &keys)?;
        check_seconds(at, "timeout_secs", c.timeout_secs, 3600)
    }

    fn preflight(&self) -> Result<(), (&'static str, String)> {
        super::security::preflight(self.tls.as_ref(), self.sasl.as_ref())?;
        let registry_ca = self.format.schema_registry.as_ref().and_then(|r| r.ca_file.as_deref());
        crate::registry::readable_files(&[("format.schema_registry.ca_file", registry_ca)])
    }

    fn target(&self, _resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
        Some(Target::Named {
            kind: "Kafka topic",
            servers: servers(&self.brokers, 9092),
            name: self.topic.clone(),
            shared: false,
        })
    }
}
