//! The Debezium envelope's options, named after Debezium's own settings.

use serde::Deserialize;

/// Debezium's placeholder for a value the source did not send.
pub const DEFAULT_UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";

/// The Debezium envelope's options, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DebeziumSettings {
    /// Wrap key and value in `{"schema": …, "payload": …}` as Kafka's
    /// JsonConverter does with `schemas.enable=true`.
    pub schemas: bool,
    /// Debezium's `topic.prefix`: the first part of schema names. `None`
    /// means the source's id.
    pub topic_prefix: Option<String>,
    /// A tombstone after each delete, where the sink has keys.
    pub tombstones: bool,
    pub decimal_handling: DecimalHandling,
    /// `None`: each connector's default (`adaptive` for PostgreSQL,
    /// `adaptive_time_microseconds` for MySQL and MariaDB, as in Debezium).
    pub time_precision: Option<TimePrecision>,
    pub binary_handling: BinaryHandling,
    /// Written for a column the source did not send (an unchanged TOAST value).
    pub unavailable_value: String,
    /// Truncate events (`op: t`); Debezium skips them by default.
    pub truncate: Include,
    /// Logical decoding messages (`op: m`).
    pub messages: Include,
    /// Debezium's `provide.transaction.metadata`: each change's
    /// `transaction` block, and BEGIN and END records.
    pub transaction_metadata: bool,
    /// Write each record's key and value as Avro datums (unframed), with
    /// their Connect schemas beside them, from which the Avro schemas are
    /// made and which name the registry subjects.
    pub avro: bool,
}

impl Default for DebeziumSettings {
    fn default() -> Self {
        Self {
            schemas: false,
            topic_prefix: None,
            tombstones: true,
            decimal_handling: DecimalHandling::default(),
            time_precision: None,
            binary_handling: BinaryHandling::default(),
            unavailable_value: DEFAULT_UNAVAILABLE_VALUE.to_string(),
            truncate: Include::Skip,
            messages: Include::Include,
            transaction_metadata: false,
            avro: false,
        }
    }
}

/// Debezium's `decimal.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DecimalHandling {
    /// Connect's `Decimal` (the unscaled value as big-endian bytes), or
    /// `VariableScaleDecimal` for a numeric without a declared scale.
    #[default]
    Precise,
    String,
    Double,
}

/// Debezium's `time.precision.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TimePrecision {
    /// Milliseconds up to 3 declared fraction digits, microseconds above.
    #[default]
    Adaptive,
    /// As adaptive, but every time of day in microseconds.
    AdaptiveTimeMicroseconds,
    /// Kafka Connect's own logical types, in milliseconds.
    Connect,
}

/// Debezium's `binary.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BinaryHandling {
    #[default]
    Bytes,
    Base64,
    Hex,
}

/// Whether a kind of event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Include {
    Include,
    #[default]
    Skip,
}
