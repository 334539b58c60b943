//! The fast path of the datum writer: the JsonConverter payload is read
//! token by token and written as Avro as it goes, without building a JSON
//! tree. The envelope writes every object's members in its schema's field
//! order, which this relies on; anything it cannot take (members in
//! another order, a value that does not fit) makes it give up, and the
//! caller writes the datum through the tree instead, whose errors say
//! what is wrong.

use std::fmt;

use base64::Engine as _;
use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};

use super::datum::{Node, bytes, long};

/// Writes `payload` under `node`; `false` when the fast path cannot.
pub(super) fn write(node: &Node, payload: &[u8], out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let mut deserializer = serde_json::Deserializer::from_slice(payload);
    let done = Seed { node, out: &mut *out }.deserialize(&mut deserializer).is_ok() && deserializer.end().is_ok();
    if !done {
        out.truncate(start);
    }
    done
}

struct Seed<'a> {
    node: &'a Node,
    out: &'a mut Vec<u8>,
}

impl<'a> Seed<'a> {
    /// The node a present value is written under: a union's branch, whose
    /// index goes first.
    fn present(&mut self) -> &'a Node {
        match self.node {
            Node::Optional { node, null_first } => {
                long(if *null_first { 1 } else { 0 }, self.out);
                node
            }
            node => node,
        }
    }

    fn float<E: Error>(mut self, value: f64) -> Result<(), E> {
        match self.present() {
            Node::Float => self.out.extend_from_slice(&(value as f32).to_le_bytes()),
            Node::Double => self.out.extend_from_slice(&value.to_le_bytes()),
            _ => return Err(E::custom("a number where the schema has none")),
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a value of {:?}", self.node)
    }

    fn visit_unit<E: Error>(self) -> Result<(), E> {
        match self.node {
            Node::Optional { null_first, .. } => long(if *null_first { 0 } else { 1 }, self.out),
            _ => return Err(E::custom("null in a required field")),
        }
        Ok(())
    }

    fn visit_bool<E: Error>(mut self, value: bool) -> Result<(), E> {
        match self.present() {
            Node::Bool => self.out.push(u8::from(value)),
            _ => return Err(E::custom("a boolean where the schema has none")),
        }
        Ok(())
    }

    fn visit_i64<E: Error>(mut self, value: i64) -> Result<(), E> {
        match self.present() {
            Node::Int if i32::try_from(value).is_ok() => long(value, self.out),
            Node::Long => long(value, self.out),
            Node::Float => self.out.extend_from_slice(&(value as f32).to_le_bytes()),
            Node::Double => self.out.extend_from_slice(&(value as f64).to_le_bytes()),
            _ => return Err(E::custom("a whole number that does not fit")),
        }
        Ok(())
    }

    fn visit_u64<E: Error>(self, value: u64) -> Result<(), E> {
        let value = i64::try_from(value).map_err(|_| E::custom("a number past i64"))?;
        self.visit_i64(value)
    }

    fn visit_f64<E: Error>(self, value: f64) -> Result<(), E> {
        self.float(value)
    }

    fn visit_str<E: Error>(mut self, value: &str) -> Result<(), E> {
        match self.present() {
            Node::String => bytes(value.as_bytes(), self.out),
            Node::Bytes => {
                let decoded = base64::engine::general_purpose::STANDARD.decode(value).map_err(E::custom)?;
                bytes(&decoded, self.out);
            }
            node @ (Node::Float | Node::Double) => {
                let special = match value {
                    "NaN" => f64::NAN,
                    "Infinity" => f64::INFINITY,
                    "-Infinity" => f64::NEG_INFINITY,
                    _ => return Err(E::custom("text where a number goes")),
                };
                match node {
                    Node::Float => self.out.extend_from_slice(&(special as f32).to_le_bytes()),
                    _ => self.out.extend_from_slice(&special.to_le_bytes()),
                }
            }
            _ => return Err(E::custom("text where the schema has none")),
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let Node::Array(items) = self.present() else { return Err(A::Error::custom("an array out of place")) };
        // Avro writes the count first: the items go to a scratch vector.
        let mut block = Vec::new();
        let mut count = 0;
        while seq.next_element_seed(Seed { node: items, out: &mut block })?.is_some() {
            count += 1;
        }
        if count > 0 {
            long(count, self.out);
            self.out.extend_from_slice(&block);
        }
        self.out.push(0);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let fields = match self.present() {
            Node::Record(fields) => fields,
            _ => return Err(A::Error::custom("an object out of place")),
        };
        let mut next = 0;
        while let Some(same) = map.next_key_seed(KeyIs(fields.get(next).map(|(name, _)| name.as_str())))? {
            if !same {
                return Err(A::Error::custom("members out of the schema's order"));
            }
            map.next_value_seed(Seed { node: &fields[next].1, out: &mut *self.out })?;
            next += 1;
        }
        // Members the payload left out are null, where they may be.
        for (_, node) in &fields[next..] {
            match node {
                Node::Optional { null_first, .. } => long(if *null_first { 0 } else { 1 }, self.out),
                _ => return Err(A::Error::custom("a required member is missing")),
            }
        }
        Ok(())
    }
}

/// A member name, and whether it is the one the schema expects next.
struct KeyIs<'a>(Option<&'a str>);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: Error>(self, name: &str) -> Result<bool, E> {
        Ok(self.0 == Some(name))
    }
}
