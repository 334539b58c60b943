//! Debezium's mapping of a declared column type to a Kafka Connect schema:
//! the Connect type, the semantic name and parameters, and how a value is
//! written.

use std::fmt::Write as _;

use sluice_core::{ColumnSchema, ColumnType, CompactString, Value, json};

use super::settings::{BinaryHandling, DecimalHandling, TimePrecision};

/// How a value of a column is written in the payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Conv {
    Bool,
    Int,
    Float,
    /// Connect `Decimal`: the unscaled value, scaled to `scale` digits.
    DecimalBytes {
        scale: u32,
    },
    /// `VariableScaleDecimal`: `{scale, value}`.
    VariableDecimal,
    DecimalString,
    DecimalDouble,
    Text,
    Binary(BinaryHandling),
    /// Text, or 16 bytes (MariaDB's UUID) written as their text form.
    Uuid,
    /// Days since the epoch.
    Date,
    TimeMillis,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    /// In UTC, with as many fraction digits as the column declares.
    ZonedTime {
        precision: u32,
    },
    ZonedTimestamp {
        precision: u32,
    },
    /// Microseconds, months counted as 30.4375 days.
    IntervalMicros,
    /// A bit string as little-endian bytes, as Java's `BitSet` writes it.
    Bits {
        length: u32,
    },
    Array(Box<Conv>),
}

/// A field's Connect schema and its writer.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub connect_type: &'static str,
    pub name: Option<&'static str>,
    pub parameters: Vec<(&'static str, String)>,
    pub items: Option<Box<Field>>,
    pub conv: Conv,
}

pub struct Modes {
    pub decimal: DecimalHandling,
    pub time: TimePrecision,
    pub binary: BinaryHandling,
}

fn plain(connect_type: &'static str, conv: Conv) -> Field {
    Field { connect_type, name: None, parameters: Vec::new(), items: None, conv }
}

fn named(connect_type: &'static str, name: &'static str, conv: Conv) -> Field {
    Field { connect_type, name: Some(name), parameters: Vec::new(), items: None, conv }
}

pub fn field(ty: &ColumnType, modes: &Modes) -> Field {
    match ty {
        ColumnType::Bool => plain("boolean", Conv::Bool),
        ColumnType::Int16 => plain("int16", Conv::Int),
        ColumnType::Int32 => plain("int32", Conv::Int),
        ColumnType::Int64 => plain("int64", Conv::Int),
        ColumnType::Float32 => plain("float", Conv::Float),
        ColumnType::Float64 => plain("double", Conv::Float),
        ColumnType::Decimal { precision, scale } => decimal(*precision, *scale, modes.decimal),
        ColumnType::Text { .. } | ColumnType::Other => plain("string", Conv::Text),
        ColumnType::Bytes => match modes.binary {
            BinaryHandling::Bytes => plain("bytes", Conv::Binary(BinaryHandling::Bytes)),
            mode => plain("string", Conv::Binary(mode)),
        },
        ColumnType::Json => named("string", "io.debezium.data.Json", Conv::Text),
        ColumnType::Uuid => named("string", "io.debezium.data.Uuid", Conv::Uuid),
        ColumnType::Date => match modes.time {
            TimePrecision::Connect => named("int32", "org.apache.kafka.connect.data.Date", Conv::Date),
            _ => named("int32", "io.debezium.time.Date", Conv::Date),
        },
        ColumnType::Time { precision } => time(*precision, modes.time),
        ColumnType::TimeTz { precision } => {
            named("string", "io.debezium.time.ZonedTime", Conv::ZonedTime { precision: *precision })
        }
        ColumnType::Timestamp { precision } => timestamp(*precision, modes.time),
        ColumnType::TimestampTz { precision } => {
            named("string", "io.debezium.time.ZonedTimestamp", Conv::ZonedTimestamp { precision: *precision })
        }
        ColumnType::Interval => named("int64", "io.debezium.time.MicroDuration", Conv::IntervalMicros),
        ColumnType::Enum { labels } => {
            let mut field = named("string", "io.debezium.data.Enum", Conv::Text);
            field.parameters.push(("allowed", labels.join(",")));
            field
        }
        ColumnType::Set { labels } => {
            let mut field = named("string", "io.debezium.data.EnumSet", Conv::Text);
            field.parameters.push(("allowed", labels.join(",")));
            field
        }
        ColumnType::Bits { length } => {
            let mut field = named("bytes", "io.debezium.data.Bits", Conv::Bits { length: *length });
            field.parameters.push(("length", length.to_string()));
            field
        }
        ColumnType::Year => named("int32", "io.debezium.time.Year", Conv::Int),
        ColumnType::Xml => named("string", "io.debezium.data.Xml", Conv::Text),
        // Debezium's `money.fraction.digits` default.
        ColumnType::Money => decimal(None, Some(2), modes.decimal),
        ColumnType::Array(element) => {
            let item = field(element, modes);
            let conv = Conv::Array(Box::new(item.conv.clone()));
            Field { connect_type: "array", name: None, parameters: Vec::new(), items: Some(Box::new(item)), conv }
        }
    }
}

/// The value Debezium gives a NOT NULL column an image does not carry.
pub fn zero(ty: &ColumnType) -> Value {
    match ty {
        ColumnType::Bool => Value::Bool(false),
        ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => Value::Int(0),
        ColumnType::Float32 | ColumnType::Float64 => Value::Float(0.0),
        ColumnType::Text { .. } | ColumnType::Other | ColumnType::Enum { .. } => Value::Text(CompactString::default()),
        ColumnType::Bytes => Value::Bytes(Vec::new()),
        _ => Value::Null,
    }
}

fn decimal(precision: Option<u32>, scale: Option<u32>, mode: DecimalHandling) -> Field {
    match (mode, scale) {
        (DecimalHandling::String, _) => plain("string", Conv::DecimalString),
        (DecimalHandling::Double, _) => plain("double", Conv::DecimalDouble),
        (DecimalHandling::Precise, Some(scale)) => {
            let mut field = named("bytes", "org.apache.kafka.connect.data.Decimal", Conv::DecimalBytes { scale });
            field.parameters.push(("scale", scale.to_string()));
            if let Some(precision) = precision {
                field.parameters.push(("connect.decimal.precision", precision.to_string()));
            }
            field
        }
        (DecimalHandling::Precise, None) => {
            named("struct", "io.debezium.data.VariableScaleDecimal", Conv::VariableDecimal)
        }
    }
}

fn time(precision: u32, mode: TimePrecision) -> Field {
    match mode {
        TimePrecision::Connect => named("int32", "org.apache.kafka.connect.data.Time", Conv::TimeMillis),
        TimePrecision::Adaptive if precision <= 3 => named("int32", "io.debezium.time.Time", Conv::TimeMillis),
        _ => named("int64", "io.debezium.time.MicroTime", Conv::TimeMicros),
    }
}

fn timestamp(precision: u32, mode: TimePrecision) -> Field {
    match mode {
        TimePrecision::Connect => named("int64", "org.apache.kafka.connect.data.Timestamp", Conv::TimestampMillis),
        _ if precision <= 3 => named("int64", "io.debezium.time.Timestamp", Conv::TimestampMillis),
        _ => named("int64", "io.debezium.time.MicroTimestamp", Conv::TimestampMicros),
    }
}

/// Writes the Connect schema of `field` as JsonConverter does, without the
/// closing brace, so a struct member can add its `"field"` name.
pub fn write_schema_open(out: &mut String, field: &Field, optional: bool) {
    let _ = write!(out, "{{\"type\":\"{}\"", field.connect_type);
    if field.conv == Conv::VariableDecimal {
        out.push_str(
            ",\"fields\":[{\"type\":\"int32\",\"optional\":false,\"field\":\"scale\"},\
             {\"type\":\"bytes\",\"optional\":false,\"field\":\"value\"}]",
        );
    }
    if let Some(items) = &field.items {
        out.push_str(",\"items\":");
        write_schema_open(out, items, true);
        out.push('}');
    }
    let _ = write!(out, ",\"optional\":{optional}");
    if let Some(name) = field.name {
        out.push_str(",\"name\":");
        json::push_str(out, name);
        out.push_str(",\"version\":1");
        if field.conv == Conv::VariableDecimal {
            out.push_str(",\"doc\":\"Variable scaled decimal\"");
        }
    }
    if !field.parameters.is_empty() {
        out.push_str(",\"parameters\":{");
        for (i, (key, value)) in field.parameters.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            json::push_str(out, key);
            out.push(':');
            json::push_str(out, value);
        }
        out.push('}');
    }
}

/// The schema of one column as a struct member.
pub fn write_column_schema(out: &mut String, column: &ColumnSchema, field: &Field, default: Option<&str>) {
    write_schema_open(out, field, column.nullable);
    if let Some(default) = default {
        out.push_str(",\"default\":");
        out.push_str(default);
    }
    out.push_str(",\"field\":");
    json::push_str(out, &column.name);
    out.push('}');
}
