//! CloudEvents 1.0: structured mode (one JSON object) everywhere, binary
//! mode (attributes in headers, the data as the body) where a sink has
//! headers. The data is the native envelope, so nothing is lost.

use serde::Deserialize;
use sluice_core::time::format_utc_micros;
use sluice_core::{Envelope, Event, Op, json};

use crate::{FormatError, Headers, Record};

/// The CloudEvents envelope's options, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudEventsSettings {
    pub mode: CloudEventsMode,
    /// The `source` attribute; `None` means `/sluice/<source id>`.
    pub source: Option<String>,
    /// The start of every `type`, followed by the operation (`.insert`).
    pub type_prefix: String,
}

/// The `type` prefix when none is set.
pub const DEFAULT_TYPE_PREFIX: &str = "io.sluice.change";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CloudEventsMode {
    #[default]
    Structured,
    Binary,
}

/// Extension attributes: lowercase letters and digits, at most 20
/// characters, as the specification asks.
#[cfg(test)]
const EXTENSIONS: [&str; 4] = ["sluiceposition", "sluicetxid", "sluicedb", "sluiceop"];

fn operation(op: Op) -> &'static str {
    match op {
        Op::Insert => "insert",
        Op::Update => "update",
        Op::Delete => "delete",
        Op::Read => "read",
        Op::Truncate => "truncate",
        Op::Message => "message",
        Op::Schema => "schema",
    }
}

pub struct Encoder {
    settings: CloudEventsSettings,
    headers: Headers,
}

impl Encoder {
    pub fn new(settings: CloudEventsSettings, headers: Headers) -> Self {
        Self { settings, headers }
    }

    /// `position` is the event's position as text, if printed already.
    pub fn encode(
        &mut self,
        event: &Event,
        (id, position): (&str, Option<&str>),
        out: &mut Vec<Record>,
    ) -> Result<(), FormatError> {
        let envelope = Envelope { event, id: id.into(), position };
        let data = serde_json::to_vec(&envelope)
            .map_err(|e| FormatError(format!("cannot encode event {}: {e}", event.position)))?;
        let source = self.settings.source.clone().unwrap_or_else(|| format!("/sluice/{}", event.source_id));
        let attributes = [
            ("specversion", "1.0".to_string()),
            ("id", envelope.id.to_string()),
            ("source", source),
            ("type", format!("{}.{}", self.settings.type_prefix, operation(event.op))),
            ("time", format_utc_micros(event.commit_time_us)),
            ("subject", event.table.to_string()),
            ("datacontenttype", "application/json".to_string()),
            ("sluiceposition", event.position.to_string()),
            ("sluicetxid", event.tx_id.to_string()),
            ("sluicedb", event.database.to_string()),
            ("sluiceop", event.op.code().to_string()),
        ];
        let record = match self.settings.mode {
            CloudEventsMode::Structured => {
                let mut text = String::with_capacity(data.len() + 384);
                for (i, (name, value)) in attributes.iter().enumerate() {
                    text.push(if i == 0 { '{' } else { ',' });
                    json::push_str(&mut text, name);
                    text.push(':');
                    json::push_str(&mut text, value);
                }
                text.push_str(",\"data\":");
                let mut value = text.into_bytes();
                value.extend_from_slice(&data);
                value.push(b'}');
                Record::value(value, Vec::new())
            }
            CloudEventsMode::Binary => {
                let kafka = self.headers == Headers::Kafka;
                let headers = attributes
                    .into_iter()
                    .map(|(name, value)| (header_name(name, kafka), header_value(value, kafka)))
                    .collect();
                Record::value(data, headers)
            }
        };
        out.push(record);
        Ok(())
    }
}

/// The header a binary-mode attribute travels in: `ce_` on Kafka, `ce-`
/// on HTTP and NATS, and the content type in the binding's own header.
fn header_name(attribute: &str, kafka: bool) -> String {
    match (attribute, kafka) {
        ("datacontenttype", true) => "content-type".to_string(),
        ("datacontenttype", false) => "Content-Type".to_string(),
        (name, true) => format!("ce_{name}"),
        (name, false) => format!("ce-{name}"),
    }
}

/// An attribute's header value. HTTP's binding (which NATS's follows)
/// percent-encodes spaces, double quotes, '%' and every byte outside
/// printable ASCII; Kafka's takes the UTF-8 as it is.
fn header_value(value: String, kafka: bool) -> Vec<u8> {
    if kafka {
        return value.into_bytes();
    }
    let mut out = Vec::with_capacity(value.len());
    for byte in value.into_bytes() {
        if (0x21..=0x7e).contains(&byte) && byte != b'"' && byte != b'%' {
            out.push(byte);
        } else {
            out.extend_from_slice(format!("%{byte:02X}").as_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn extension_names_follow_the_specification() {
        for name in super::EXTENSIONS {
            assert!(name.len() <= 20 && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()), "{name}");
        }
    }

    #[test]
    fn http_and_nats_header_values_are_percent_encoded_and_kafka_values_are_not() {
        let value = "public.\"Ordres 100%\" é".to_string();
        assert_eq!(super::header_value(value.clone(), false), b"public.%22Ordres%20100%25%22%20%C3%A9");
        assert_eq!(super::header_value(value.clone(), true), value.into_bytes());
    }
}
