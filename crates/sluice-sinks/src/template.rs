//! Topic, stream and key templates: `${db}`, `${table}`, `${op}`,
//! `${key.<column>}`.

use sluice_core::{Event, Row, Value};

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
        out.clear();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Db => out.push_str(&event.database),
                Part::Table => out.push_str(&event.table),
                Part::Op => out.push_str(event.op.code()),
                Part::Key(column) => {
                    if let Some(value) = event.key.as_ref().and_then(|k| k.get(column)) {
                        push_value(value, out);
                    }
                }
            }
        }
    }
}

fn push_value(value: &Value, out: &mut String) {
    match value {
        Value::Text(s)
        | Value::Decimal(s)
        | Value::Date(s)
        | Value::Time(s)
        | Value::Timestamp(s)
        | Value::TimestampTz(s) => out.push_str(s),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::UInt(u) => out.push_str(&u.to_string()),
        Value::Null => out.push_str("null"),
        other => out.push_str(&serde_json::to_string(other).unwrap_or_default()),
    }
}

/// The default message key: the primary key as a JSON object, so every
/// change of one row lands in one partition, in order.
pub fn default_key(key: &Row, out: &mut Vec<u8>) {
    out.clear();
    // Serialising a Row cannot fail: every value has a JSON form.
    let _ = serde_json::to_writer(out, key);
}
