//! Topic, stream and key templates: `${db}`, `${table}`, `${op}`,
//! `${key.<column>}`. `${table}` is the event's destination: the name a
//! `route` transform gave it, or its table.

// Each network sink uses its own part of this module; a build with only
// some of them leaves the rest unused.
#![allow(dead_code)]

use sluice_core::{Event, Row};

/// A template split into literal text and placeholders.
#[derive(Debug, Clone)]
pub struct Template(Vec<Part>);

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Db,
    Table,
    Op,
    Key(String),
}

impl Template {
    /// Parses a template that config validation already checked.
    pub fn parse(template: &str) -> Self {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(start) = rest.find("${") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_string()));
            }
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else { break };
            parts.push(match &after[..end] {
                "db" => Part::Db,
                "table" => Part::Table,
                "op" => Part::Op,
                other => Part::Key(other.strip_prefix("key.").unwrap_or(other).to_string()),
            });
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Template(parts)
    }

    pub fn render(&self, event: &Event, out: &mut String) {
        self.render_escaped(event, out, |value, out| out.push_str(value));
    }

    /// Renders with each placeholder's value passed through `escape`, for
    /// destinations (URLs) where a value must not change the structure.
    pub fn render_escaped(&self, event: &Event, out: &mut String, escape: impl Fn(&str, &mut String)) {
        out.clear();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Db => escape(&event.database, out),
                Part::Table => escape(event.destination(), out),
                Part::Op => escape(event.op.code(), out),
                Part::Key(column) => {
                    if let Some(value) = event.key.as_ref().and_then(|k| k.get(column)) {
                        escape(&value.text(), out);
                    }
                }
            }
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn percent_encode(value: &str, out: &mut String) {
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

/// The default message key: the primary key as a JSON object, so every
/// change of one row lands in one partition, in order.
pub fn default_key(key: &Row, out: &mut Vec<u8>) {
    out.clear();
    // Serialising a Row cannot fail: every value has a JSON form.
    let _ = serde_json::to_writer(out, key);
}
