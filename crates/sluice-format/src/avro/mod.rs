//! Avro: the schemas and binary datums of the records an envelope writes,
//! as Kafka Connect's Avro converter makes them from the same Connect
//! schema and value. The envelope (Debezium's) gives each record its
//! Connect schema and its JsonConverter payload; this turns both into
//! Avro. The registry id in front of each datum is the sink's business.

mod container;
mod datum;
mod direct;
mod schema;
mod stream;
#[cfg(test)]
mod tests;

pub use container::{AvroCodec, AvroContainer};
pub(crate) use direct::AvroOut;

use crate::FormatError;

/// One Connect schema in Avro: the text a registry is given, the full name
/// of its record, and the plan that writes its values.
#[derive(Debug)]
pub struct AvroSchema {
    text: String,
    name: String,
    node: datum::Node,
}

impl AvroSchema {
    /// The Avro schema of a Connect schema written as JsonConverter writes
    /// one. Checked by the `apache-avro` parser, so a schema this makes is
    /// one every Avro reader takes.
    pub fn from_connect(connect: &str) -> Result<Self, FormatError> {
        let refuse = |why: String| FormatError(format!("no Avro schema for Connect schema {connect}: {why}"));
        let connect: serde_json::Value = serde_json::from_str(connect).map_err(|e| refuse(e.to_string()))?;
        let (json, node) = schema::convert(&connect, &mut schema::Context::default(), false).map_err(refuse)?;
        let text = json.to_string();
        apache_avro::Schema::parse_str(&text).map_err(|e| refuse(format!("Avro refuses {text}: {e}")))?;
        let name = connect.get("name").and_then(|n| n.as_str()).unwrap_or_default().to_string();
        Ok(Self { text, name, node })
    }

    /// The schema as JSON text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The full name of the record (`<prefix>.<schema>.<table>.Envelope`),
    /// which the record subject strategies use.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Appends the Avro encoding of a JsonConverter payload of this schema.
    pub fn write(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), FormatError> {
        if stream::write(&self.node, payload, out) {
            return Ok(());
        }
        let value: serde_json::Value =
            serde_json::from_slice(payload).map_err(|e| FormatError(format!("a payload that is not JSON: {e}")))?;
        datum::write(&self.node, &value, out)
            .map_err(|e| FormatError(format!("the value does not fit Avro schema {}: {e}", self.name)))
    }
}
