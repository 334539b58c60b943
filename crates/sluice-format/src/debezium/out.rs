//! Where a change's payload goes: JSON text, as JsonConverter writes it,
//! or (for Avro) a datum written straight under the schema's plan, so an
//! Avro record never passes through JSON. The encoder writes each struct's
//! fields in its schema's order, which the Avro writer relies on.

use std::fmt::Write as _;

use base64::Engine as _;
use sluice_core::json;

/// Calls fail only where the value does not fit the Avro schema.
pub trait Out {
    fn null(&mut self) -> Result<(), String>;
    fn bool(&mut self, value: bool) -> Result<(), String>;
    /// A Connect int8 to int64.
    fn long(&mut self, value: i64) -> Result<(), String>;
    /// A Connect float32 or float64; JSON writes NaN and the infinities
    /// as strings.
    fn double(&mut self, value: f64) -> Result<(), String>;
    fn str(&mut self, value: &str) -> Result<(), String>;
    /// Connect bytes: base64 in JSON.
    fn bytes(&mut self, value: &[u8]) -> Result<(), String>;
    fn begin_struct(&mut self) -> Result<(), String>;
    /// The next field of the struct being written.
    fn key(&mut self, name: &str) -> Result<(), String>;
    fn end_struct(&mut self) -> Result<(), String>;
    fn begin_array(&mut self, len: usize) -> Result<(), String>;
    fn end_array(&mut self) -> Result<(), String>;
}

/// JsonConverter's payload text.
#[derive(Default)]
pub struct JsonOut {
    pub text: String,
    /// Per open struct or array: whether it is an array, and whether
    /// nothing is in it yet.
    frames: Vec<(bool, bool)>,
}

impl JsonOut {
    pub fn with_capacity(capacity: usize) -> Self {
        Self { text: String::with_capacity(capacity), frames: Vec::with_capacity(4) }
    }

    /// The comma before an array's second and later items.
    fn item(&mut self) {
        if let Some((true, first)) = self.frames.last_mut() {
            if !*first {
                self.text.push(',');
            }
            *first = false;
        }
    }
}

impl Out for JsonOut {
    fn null(&mut self) -> Result<(), String> {
        self.item();
        self.text.push_str("null");
        Ok(())
    }

    fn bool(&mut self, value: bool) -> Result<(), String> {
        self.item();
        self.text.push_str(if value { "true" } else { "false" });
        Ok(())
    }

    fn long(&mut self, value: i64) -> Result<(), String> {
        self.item();
        let _ = write!(self.text, "{value}");
        Ok(())
    }

    fn double(&mut self, value: f64) -> Result<(), String> {
        self.item();
        let text = &mut self.text;
        if value.is_finite() {
            text.push_str(&serde_json::to_string(&value).unwrap_or_else(|_| "null".into()));
        } else if value.is_nan() {
            text.push_str("\"NaN\"");
        } else if value > 0.0 {
            text.push_str("\"Infinity\"");
        } else {
            text.push_str("\"-Infinity\"");
        }
        Ok(())
    }

    fn str(&mut self, value: &str) -> Result<(), String> {
        self.item();
        json::push_str(&mut self.text, value);
        Ok(())
    }

    fn bytes(&mut self, value: &[u8]) -> Result<(), String> {
        self.item();
        self.text.push('"');
        base64::engine::general_purpose::STANDARD.encode_string(value, &mut self.text);
        self.text.push('"');
        Ok(())
    }

    fn begin_struct(&mut self) -> Result<(), String> {
        self.item();
        self.text.push('{');
        self.frames.push((false, true));
        Ok(())
    }

    fn key(&mut self, name: &str) -> Result<(), String> {
        if let Some((false, first)) = self.frames.last_mut() {
            if !*first {
                self.text.push(',');
            }
            *first = false;
        }
        json::push_str(&mut self.text, name);
        self.text.push(':');
        Ok(())
    }

    fn end_struct(&mut self) -> Result<(), String> {
        self.frames.pop();
        self.text.push('}');
        Ok(())
    }

    fn begin_array(&mut self, _len: usize) -> Result<(), String> {
        self.item();
        self.text.push('[');
        self.frames.push((true, true));
        Ok(())
    }

    fn end_array(&mut self) -> Result<(), String> {
        self.frames.pop();
        self.text.push(']');
        Ok(())
    }
}
