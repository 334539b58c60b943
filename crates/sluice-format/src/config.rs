//! The `format:` block of a sink's config.
//!
//! One flat block whose `envelope` decides which other options apply; an
//! option of another envelope is an error that names it, so nothing set
//! is silently ignored.

use serde::Deserialize;
use sluice_core::settings::Invalid;

use crate::cloudevents::{CloudEventsMode, CloudEventsSettings, DEFAULT_TYPE_PREFIX};
use crate::debezium::{BinaryHandling, DebeziumSettings, DecimalHandling, Include, TimePrecision};
use crate::registry::RegistryConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Envelope {
    /// Sluice's own event, byte for byte as it always was.
    #[default]
    Native,
    /// Debezium's change event, as its JSON converter writes it.
    Debezium,
    /// CloudEvents 1.0, with the native event as its data.
    Cloudevents,
}

/// How a record's key and value become bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Json,
    /// Avro, each datum framed with its schema's registry id.
    Avro,
}

/// How a schema's subject in the registry is named, as Confluent's
/// serializers name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SubjectStrategy {
    /// `<topic>-key` and `<topic>-value`.
    #[default]
    Topic,
    /// The record's full name: `<prefix>.<schema>.<table>.Envelope`.
    Record,
    /// `<topic>-<record full name>`.
    TopicRecord,
}

impl SubjectStrategy {
    /// The subject of a key (`is_key`) or value schema whose record is
    /// `record`, written to `topic`.
    pub fn subject(self, topic: &str, record: &str, is_key: bool) -> String {
        match self {
            SubjectStrategy::Topic => format!("{topic}-{}", if is_key { "key" } else { "value" }),
            SubjectStrategy::Record => record.to_string(),
            SubjectStrategy::TopicRecord => format!("{topic}-{record}"),
        }
    }
}

/// A sink's output format.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FormatConfig {
    #[serde(default)]
    pub envelope: Envelope,
    /// Debezium: the `{"schema", "payload"}` wrapper (JsonConverter's `schemas.enable`).
    pub schemas: Option<bool>,
    /// Debezium: `topic.prefix`, the start of schema names; default the source id.
    pub topic_prefix: Option<String>,
    /// Debezium: a tombstone after each delete, on sinks with keys; default true there.
    pub tombstones: Option<bool>,
    pub decimal_handling: Option<DecimalHandling>,
    pub time_precision: Option<TimePrecision>,
    pub binary_handling: Option<BinaryHandling>,
    /// Debezium: the text of a value the source did not send.
    pub unavailable_value: Option<String>,
    /// Debezium: truncate events; default skip, as Debezium does.
    pub truncate: Option<Include>,
    /// Debezium: logical decoding messages; default include.
    pub messages: Option<Include>,
    /// Debezium: `provide.transaction.metadata`; default false.
    pub transaction_metadata: Option<bool>,
    /// CloudEvents: structured (one JSON object) or binary (attributes in headers).
    pub mode: Option<CloudEventsMode>,
    /// CloudEvents: the `source` attribute; default `/sluice/<source id>`.
    pub source: Option<String>,
    /// CloudEvents: the start of `type`; default `io.sluice.change`.
    pub type_prefix: Option<String>,
    /// json (default) or avro, which needs `schema_registry`.
    pub encoding: Option<Encoding>,
    /// Avro: the Confluent-compatible registry that holds the schemas.
    pub schema_registry: Option<RegistryConfig>,
    /// Avro: how subjects are named; default `topic`.
    pub subject_strategy: Option<SubjectStrategy>,
}

/// What a sink can carry besides a value, which decides the formats it
/// takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Carrier {
    pub name: &'static str,
    /// Message keys (Kafka), so Debezium's keys and tombstones mean something.
    pub keys: bool,
    /// Message headers, and how a binding writes them.
    pub headers: Headers,
    /// Whether, and how, the sink writes Avro.
    pub avro: AvroSupport,
}

/// How a sink carries the schemas of the Avro it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvroSupport {
    /// The sink writes no Avro.
    None,
    /// Each datum framed with its schema's id in a registry.
    Registry,
    /// Object container files, whose header holds their schema.
    Files,
}

/// A sink's message headers, as CloudEvents' protocol bindings name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headers {
    None,
    /// `ce_<attribute>`, values as they are.
    Kafka,
    /// `ce-<attribute>`, values percent-encoded (HTTP, and NATS, whose
    /// binding follows HTTP's).
    Text,
}

impl FormatConfig {
    fn debezium_options(&self) -> [(&'static str, bool); 10] {
        [
            ("schemas", self.schemas.is_some()),
            ("topic_prefix", self.topic_prefix.is_some()),
            ("tombstones", self.tombstones.is_some()),
            ("decimal_handling", self.decimal_handling.is_some()),
            ("time_precision", self.time_precision.is_some()),
            ("binary_handling", self.binary_handling.is_some()),
            ("unavailable_value", self.unavailable_value.is_some()),
            ("truncate", self.truncate.is_some()),
            ("messages", self.messages.is_some()),
            ("transaction_metadata", self.transaction_metadata.is_some()),
        ]
    }

    fn cloudevents_options(&self) -> [(&'static str, bool); 3] {
        [("mode", self.mode.is_some()), ("source", self.source.is_some()), ("type_prefix", self.type_prefix.is_some())]
    }

    /// `at` is the sink's config path; errors name `<at>.format.<field>`.
    pub fn validate(&self, at: &str, carrier: Carrier) -> Result<(), Invalid> {
        let field = |name: &str| format!("{at}.format.{name}");
        let foreign = |name: &str, owner: &str| {
            Invalid::new(
                field(name),
                format!("applies to the {owner} envelope, not to {:?}", self.envelope_name()),
                format!("remove it, or set envelope: {owner}"),
            )
        };
        if self.envelope != Envelope::Debezium
            && let Some((name, _)) = self.debezium_options().into_iter().find(|(_, set)| *set)
        {
            return Err(foreign(name, "debezium"));
        }
        if self.envelope != Envelope::Cloudevents
            && let Some((name, _)) = self.cloudevents_options().into_iter().find(|(_, set)| *set)
        {
            return Err(foreign(name, "cloudevents"));
        }
        if self.tombstones == Some(true) && !carrier.keys {
            return Err(Invalid::new(
                field("tombstones"),
                format!("a {} sink has no message keys, so a tombstone cannot name a key", carrier.name),
                "remove tombstones (they are written only where messages have keys, such as Kafka)",
            ));
        }
        if self.mode == Some(CloudEventsMode::Binary) && carrier.headers == Headers::None {
            return Err(Invalid::new(
                field("mode"),
                format!("a {} sink has no message headers to carry binary-mode attributes", carrier.name),
                "use mode: structured",
            ));
        }
        if let Some(prefix) = &self.topic_prefix {
            let plain = prefix.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if prefix.is_empty() || !plain {
                return Err(Invalid::new(
                    field("topic_prefix"),
                    format!("{prefix:?} cannot start a topic or schema name"),
                    "use letters, digits, '_', '-' and '.', as Debezium's topic.prefix",
                ));
            }
        }
        self.validate_encoding(at, carrier)?;
        for (name, value) in [("source", &self.source), ("type_prefix", &self.type_prefix)] {
            if value.as_deref() == Some("") {
                return Err(Invalid::new(field(name), "is empty", "remove it for the default, or give a value"));
            }
        }
        Ok(())
    }

    fn validate_encoding(&self, at: &str, carrier: Carrier) -> Result<(), Invalid> {
        let field = |name: &str| format!("{at}.format.{name}");
        if !self.is_avro() {
            for (name, set) in [
                ("schema_registry", self.schema_registry.is_some()),
                ("subject_strategy", self.subject_strategy.is_some()),
            ] {
                if set {
                    return Err(Invalid::new(
                        field(name),
                        "applies to encoding: avro only",
                        "remove it, or set encoding: avro",
                    ));
                }
            }
            return Ok(());
        }
        if carrier.avro == AvroSupport::None {
            return Err(Invalid::new(
                field("encoding"),
                format!("a {} sink cannot write Avro", carrier.name),
                "use encoding: json on this sink (Avro is written by the kafka, nats, redis, http and s3 sinks)",
            ));
        }
        if self.envelope != Envelope::Debezium {
            return Err(Invalid::new(
                field("encoding"),
                format!("avro takes envelope: debezium, not {:?}", self.envelope_name()),
                "set envelope: debezium, whose Connect schemas become the Avro schemas",
            ));
        }
        if self.schemas.is_some() {
            return Err(Invalid::new(
                field("schemas"),
                "does not apply to avro, whose schemas travel apart from the values",
                "remove it",
            ));
        }
        if carrier.avro == AvroSupport::Files {
            for (name, set, why) in [
                ("schema_registry", self.schema_registry.is_some(), "an Avro file holds its schema in its header"),
                ("subject_strategy", self.subject_strategy.is_some(), "an Avro file holds its schema in its header"),
                (
                    "transaction_metadata",
                    self.transaction_metadata == Some(true),
                    "an Avro file holds one schema, and transaction records have another",
                ),
            ] {
                if set {
                    return Err(Invalid::new(field(name), format!("does not apply to Avro files: {why}"), "remove it"));
                }
            }
            return Ok(());
        }
        match &self.schema_registry {
            None => Err(Invalid::new(
                field("schema_registry"),
                "is required by encoding: avro",
                "add schema_registry: { url: ... } naming a Confluent-compatible registry",
            )),
            Some(registry) => registry.validate(&field("schema_registry")),
        }
    }

    pub fn is_avro(&self) -> bool {
        self.encoding == Some(Encoding::Avro)
    }

    pub fn envelope_name(&self) -> &'static str {
        match self.envelope {
            Envelope::Native => "native",
            Envelope::Debezium => "debezium",
            Envelope::Cloudevents => "cloudevents",
        }
    }

    /// The Debezium options with defaults; `keys` says whether the sink
    /// has message keys (tombstones default to on only there).
    pub fn debezium(&self, keys: bool) -> DebeziumSettings {
        let defaults = DebeziumSettings::default();
        DebeziumSettings {
            schemas: self.schemas.unwrap_or(defaults.schemas),
            topic_prefix: self.topic_prefix.clone(),
            tombstones: self.tombstones.unwrap_or(keys),
            decimal_handling: self.decimal_handling.unwrap_or(defaults.decimal_handling),
            time_precision: self.time_precision,
            binary_handling: self.binary_handling.unwrap_or(defaults.binary_handling),
            unavailable_value: self.unavailable_value.clone().unwrap_or(defaults.unavailable_value),
            truncate: self.truncate.unwrap_or(defaults.truncate),
            messages: self.messages.unwrap_or(defaults.messages),
            transaction_metadata: self.transaction_metadata.unwrap_or(defaults.transaction_metadata),
            avro: self.is_avro(),
        }
    }

    pub fn cloudevents(&self) -> CloudEventsSettings {
        CloudEventsSettings {
            mode: self.mode.unwrap_or_default(),
            source: self.source.clone(),
            type_prefix: self.type_prefix.clone().unwrap_or_else(|| DEFAULT_TYPE_PREFIX.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<FormatConfig, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    const FILE: Carrier = Carrier { name: "file", keys: false, headers: Headers::None, avro: AvroSupport::None };
    const KAFKA: Carrier = Carrier { name: "kafka", keys: true, headers: Headers::Kafka, avro: AvroSupport::Registry };

    #[test]
    fn unknown_options_and_envelopes_are_refused_by_name() {
        let err = parse(r#"{"envelope":"debezium","schema":true}"#).unwrap_err();
        assert!(err.contains("unknown field `schema`"), "{err}");
        let err = parse(r#"{"envelope":"avro"}"#).unwrap_err();
        assert!(err.contains("unknown variant `avro`"), "{err}");
    }

    #[test]
    fn an_option_of_another_envelope_is_refused_not_ignored() {
        let native = parse(r#"{"schemas":true}"#).unwrap();
        let err = native.validate("s", KAFKA).unwrap_err();
        assert_eq!(err.field, "s.format.schemas");
        assert!(err.problem.contains("debezium"), "{err}");
        let debezium = parse(r#"{"envelope":"debezium","mode":"binary"}"#).unwrap();
        assert_eq!(debezium.validate("s", KAFKA).unwrap_err().field, "s.format.mode");
    }

    #[test]
    fn binary_cloudevents_need_headers_and_tombstones_need_keys() {
        let binary = parse(r#"{"envelope":"cloudevents","mode":"binary"}"#).unwrap();
        let err = binary.validate("pipelines[0].sinks[0].config", FILE).unwrap_err();
        assert_eq!(err.field, "pipelines[0].sinks[0].config.format.mode");
        let tombstones = parse(r#"{"envelope":"debezium","tombstones":true}"#).unwrap();
        assert_eq!(tombstones.validate("s", FILE).unwrap_err().field, "s.format.tombstones");
        assert!(binary.validate("s", KAFKA).is_ok());
        assert!(tombstones.validate("s", KAFKA).is_ok());
    }

    #[test]
    fn tombstones_default_on_only_where_there_are_keys() {
        let debezium = parse(r#"{"envelope":"debezium"}"#).unwrap();
        assert!(debezium.debezium(true).tombstones);
        assert!(!debezium.debezium(false).tombstones);
    }

    #[test]
    fn avro_needs_the_debezium_envelope_a_registry_and_a_sink_that_writes_it() {
        let avro = |extra: &str| parse(&format!(r#"{{"envelope":"debezium","encoding":"avro"{extra}}}"#)).unwrap();
        let registry = r#","schema_registry":{"url":"http://r:8081"}"#;
        assert_eq!(avro("").validate("s", KAFKA).unwrap_err().field, "s.format.schema_registry");
        assert!(avro(registry).validate("s", KAFKA).is_ok());
        assert_eq!(avro(registry).validate("s", FILE).unwrap_err().field, "s.format.encoding");
        let schemas = format!(r#","schemas":true{registry}"#);
        assert_eq!(avro(&schemas).validate("s", KAFKA).unwrap_err().field, "s.format.schemas");
        let bad_url = r#","schema_registry":{"url":"registry:8081"}"#;
        assert_eq!(avro(bad_url).validate("s", KAFKA).unwrap_err().field, "s.format.schema_registry.url");
        let native = parse(&format!(r#"{{"encoding":"avro"{registry}}}"#)).unwrap();
        assert_eq!(native.validate("s", KAFKA).unwrap_err().field, "s.format.encoding");
        let json = parse(&format!(r#"{{"envelope":"debezium"{registry}}}"#)).unwrap();
        assert_eq!(json.validate("s", KAFKA).unwrap_err().field, "s.format.schema_registry");
    }

    #[test]
    fn subjects_follow_confluents_strategies() {
        let record = "shop.public.orders.Envelope";
        assert_eq!(SubjectStrategy::Topic.subject("orders", record, false), "orders-value");
        assert_eq!(SubjectStrategy::Topic.subject("orders", "shop.public.orders.Key", true), "orders-key");
        assert_eq!(SubjectStrategy::Record.subject("orders", record, false), record);
        assert_eq!(SubjectStrategy::TopicRecord.subject("orders", record, false), "orders-shop.public.orders.Envelope");
    }
}
