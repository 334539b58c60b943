//! Avro datums written straight from the envelope's calls, walking the
//! schema's plan as the fields come: no JSON on the way.

use super::AvroSchema;
use super::datum::{Node, bytes, long};
use crate::debezium::out::Out;

enum Frame<'a> {
    Record { fields: &'a [(String, Node)], next: usize },
    Array { items: &'a Node },
}

/// A datum of one schema being written.
pub struct AvroOut<'a> {
    pub datum: Vec<u8>,
    /// The node of the next value, set by the record's field or the root.
    pending: Option<&'a Node>,
    frames: Vec<Frame<'a>>,
}

impl<'a> AvroOut<'a> {
    pub fn new(schema: &'a AvroSchema, capacity: usize) -> Self {
        Self { datum: Vec::with_capacity(capacity), pending: Some(&schema.node), frames: Vec::with_capacity(4) }
    }

    /// The node the next value is written under.
    fn node(&mut self) -> Result<&'a Node, String> {
        match self.frames.last() {
            Some(Frame::Array { items }) => Ok(items),
            _ => self.pending.take().ok_or_else(|| "a value where the schema has no field".to_string()),
        }
    }

    /// The node of a value that is present: a union's branch, whose index
    /// goes first.
    fn present(&mut self) -> Result<&'a Node, String> {
        match self.node()? {
            Node::Optional { node, null_first } => {
                long(if *null_first { 1 } else { 0 }, &mut self.datum);
                Ok(node)
            }
            node => Ok(node),
        }
    }
}

fn misfit(what: &str, node: &Node) -> String {
    format!("{what} where the Avro schema has {node:?}")
}

impl Out for AvroOut<'_> {
    fn null(&mut self) -> Result<(), String> {
        match self.node()? {
            Node::Optional { null_first, .. } => {
                long(if *null_first { 0 } else { 1 }, &mut self.datum);
                Ok(())
            }
            node => Err(misfit("null", node)),
        }
    }

    fn bool(&mut self, value: bool) -> Result<(), String> {
        match self.present()? {
            Node::Bool => {
                self.datum.push(u8::from(value));
                Ok(())
            }
            node => Err(misfit("a boolean", node)),
        }
    }

    fn long(&mut self, value: i64) -> Result<(), String> {
        match self.present()? {
            Node::Int if i32::try_from(value).is_err() => Err(format!("{value} does not fit an Avro int")),
            Node::Int | Node::Long => {
                long(value, &mut self.datum);
                Ok(())
            }
            node => Err(misfit("a whole number", node)),
        }
    }

    fn double(&mut self, value: f64) -> Result<(), String> {
        match self.present()? {
            Node::Float => self.datum.extend_from_slice(&(value as f32).to_le_bytes()),
            Node::Double => self.datum.extend_from_slice(&value.to_le_bytes()),
            node => return Err(misfit("a number", node)),
        }
        Ok(())
    }

    fn str(&mut self, value: &str) -> Result<(), String> {
        match self.present()? {
            Node::String => {
                bytes(value.as_bytes(), &mut self.datum);
                Ok(())
            }
            node => Err(misfit("a string", node)),
        }
    }

    fn bytes(&mut self, value: &[u8]) -> Result<(), String> {
        match self.present()? {
            Node::Bytes => {
                bytes(value, &mut self.datum);
                Ok(())
            }
            node => Err(misfit("bytes", node)),
        }
    }

    fn begin_struct(&mut self) -> Result<(), String> {
        match self.present()? {
            Node::Record(fields) => {
                self.frames.push(Frame::Record { fields, next: 0 });
                Ok(())
            }
            node => Err(misfit("a struct", node)),
        }
    }

    fn key(&mut self, name: &str) -> Result<(), String> {
        let Some(Frame::Record { fields, next }) = self.frames.last_mut() else {
            return Err(format!("field {name:?} outside a struct"));
        };
        match fields.get(*next) {
            // The schema and the writer come from the same columns in the
            // same order; the length catches a writer out of step cheaply.
            Some((field, node)) if field.len() == name.len() => {
                debug_assert_eq!(field, name);
                *next += 1;
                self.pending = Some(node);
                Ok(())
            }
            Some((field, _)) => Err(format!("field {name:?} where the Avro schema has {field:?}")),
            None => Err(format!("field {name:?} past the Avro schema's last")),
        }
    }

    fn end_struct(&mut self) -> Result<(), String> {
        match self.frames.pop() {
            Some(Frame::Record { fields, next }) if next == fields.len() => Ok(()),
            Some(Frame::Record { fields, next }) => Err(format!("a struct without field {:?}", fields[next].0)),
            _ => Err("the end of a struct that was not begun".into()),
        }
    }

    fn begin_array(&mut self, len: usize) -> Result<(), String> {
        match self.present()? {
            Node::Array(items) => {
                if len > 0 {
                    long(len as i64, &mut self.datum);
                }
                self.frames.push(Frame::Array { items });
                Ok(())
            }
            node => Err(misfit("an array", node)),
        }
    }

    fn end_array(&mut self) -> Result<(), String> {
        match self.frames.pop() {
            Some(Frame::Array { .. }) => {
                self.datum.push(0);
                Ok(())
            }
            _ => Err("the end of an array that was not begun".into()),
        }
    }
}
