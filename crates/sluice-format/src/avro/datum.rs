//! Avro's binary encoding of a JsonConverter payload, walked by the plan
//! its schema was compiled to.

use base64::Engine as _;
use serde_json::Value;

/// How one value is written; compiled once per schema version.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Bool,
    Int,
    Long,
    Float,
    Double,
    String,
    /// JsonConverter writes bytes (and Connect decimals) as base64.
    Bytes,
    Array(Box<Node>),
    Map(Box<Node>),
    Record(Vec<(String, Node)>),
    /// A union of null and `node`; `null_first` says which branch is 0.
    Optional {
        node: Box<Node>,
        null_first: bool,
    },
}

/// Appends the encoding of `value` under `node` to `out`.
pub(super) fn write(node: &Node, value: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    match (node, value) {
        (Node::Optional { null_first, .. }, Value::Null) => long(if *null_first { 0 } else { 1 }, out),
        (Node::Optional { node, null_first }, value) => {
            long(if *null_first { 1 } else { 0 }, out);
            write(node, value, out)?;
        }
        (Node::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
        (Node::Int | Node::Long, Value::Number(n)) => {
            let n = n.as_i64().ok_or_else(|| format!("{n} is not a whole number in range"))?;
            if *node == Node::Int && i32::try_from(n).is_err() {
                return Err(format!("{n} does not fit an Avro int"));
            }
            long(n, out);
        }
        (Node::Float, value) => out.extend_from_slice(&(float(value)? as f32).to_le_bytes()),
        (Node::Double, value) => out.extend_from_slice(&float(value)?.to_le_bytes()),
        (Node::String, Value::String(s)) => bytes(s.as_bytes(), out),
        (Node::Bytes, Value::String(encoded)) => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("bytes that are not base64: {e}"))?;
            bytes(&decoded, out);
        }
        (Node::Array(items), Value::Array(values)) => {
            if !values.is_empty() {
                long(values.len() as i64, out);
                for value in values {
                    write(items, value, out)?;
                }
            }
            out.push(0);
        }
        (Node::Map(node), Value::Object(entries)) => {
            if !entries.is_empty() {
                long(entries.len() as i64, out);
                for (key, value) in entries {
                    bytes(key.as_bytes(), out);
                    write(node, value, out)?;
                }
            }
            out.push(0);
        }
        (Node::Record(fields), Value::Object(members)) => {
            for (name, node) in fields {
                let value = members.get(name).unwrap_or(&Value::Null);
                write(node, value, out).map_err(|e| format!("field {name:?}: {e}"))?;
            }
        }
        (node, value) => return Err(format!("{value} does not fit the schema's {node:?}")),
    }
    Ok(())
}

/// JsonConverter writes NaN and the infinities as strings.
fn float(value: &Value) -> Result<f64, String> {
    match value {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("{n} is not a number")),
        Value::String(s) if s == "NaN" => Ok(f64::NAN),
        Value::String(s) if s == "Infinity" => Ok(f64::INFINITY),
        Value::String(s) if s == "-Infinity" => Ok(f64::NEG_INFINITY),
        other => Err(format!("{other} is not a number")),
    }
}

/// A zigzag varint, Avro's int and long.
pub(super) fn long(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

pub(super) fn bytes(data: &[u8], out: &mut Vec<u8>) {
    long(data.len() as i64, out);
    out.extend_from_slice(data);
}
