//! Parquet files: the row image in typed columns, plus the event's lineage.
//!
//! Events carry column names but no declared types, so each column's type
//! comes from its first non-null value in the file, and stays for the file:
//! an event whose value does not fit (another type, a wider decimal scale,
//! other columns) makes the sink start a new file (see `accepts`).
//!
//! | value | column |
//! |---|---|
//! | bool, int, unsigned, float | BOOLEAN, INT64, UINT64, DOUBLE |
//! | decimal | DECIMAL(38, s), s = the larger of 9 and the first value's scale |
//! | date | DATE |
//! | timestamp / timestamp with time zone | TIMESTAMP(µs) / TIMESTAMP(µs, UTC) |
//! | binary | BINARY |
//! | text, JSON, time of day, arrays, and values a typed column cannot hold (`NaN` decimals, `infinity` dates) | STRING |

use std::fmt::Write as _;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use sluice_core::time::{parse_iso_date, parse_iso_timestamp};
use sluice_core::{Event, Op, Row, SinkError, Value};

use super::Compression;

/// Rows per record batch handed to the Parquet writer.
const BATCH_ROWS: usize = 8192;
/// Rows per row group.
const ROW_GROUP_ROWS: usize = 128 * 1024;
/// A row group is also cut at about this many buffered bytes, which bounds
/// the writer's memory whatever the row width.
const ROW_GROUP_BYTES: usize = 32 * 1024 * 1024;
/// Smallest scale of a decimal column, so values with a few more fraction
/// digits than the first one still fit the file.
const MIN_DECIMAL_SCALE: usize = 9;
const DECIMAL_PRECISION: usize = 38;

/// The lineage columns, before the row's own.
const META_COLUMNS: [&str; 8] = [
    "sluice_op",
    "sluice_event_id",
    "sluice_position",
    "sluice_tx_id",
    "sluice_commit_time",
    "sluice_schema_version",
    "sluice_before",
    "sluice_unchanged",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Int,
    UInt,
    Float,
    Decimal(i8),
    Text,
    Bytes,
    Date,
    Timestamp,
    TimestampTz,
}

enum Column {
    /// Only nulls so far; the count.
    Undecided(usize),
    Bool(BooleanBuilder),
    Int(Int64Builder),
    UInt(UInt64Builder),
    Float(Float64Builder),
    Decimal(Decimal128Builder, i8),
    Text(StringBuilder),
    Bytes(BinaryBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    TimestampTz(TimestampMicrosecondBuilder),
}

struct Meta {
    op: StringBuilder,
    id: StringBuilder,
    position: StringBuilder,
    tx_id: StringBuilder,
    commit_time: TimestampMicrosecondBuilder,
    schema_version: UInt32Builder,
    before: StringBuilder,
    unchanged: StringBuilder,
}

impl Meta {
    fn new() -> Self {
        Self {
            op: StringBuilder::new(),
            id: StringBuilder::new(),
            position: StringBuilder::new(),
            tx_id: StringBuilder::new(),
            commit_time: TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            schema_version: UInt32Builder::new(),
            before: StringBuilder::new(),
            unchanged: StringBuilder::new(),
        }
    }
}

pub(super) struct ParquetFile {
    names: Vec<Arc<str>>,
    kinds: Vec<Option<Kind>>,
    columns: Vec<Column>,
    meta: Meta,
    rows: usize,
    events: u64,
    file: Option<File>,
    writer: Option<ArrowWriter<File>>,
    properties: Option<WriterProperties>,
}

impl ParquetFile {
    pub fn create(path: &Path, compression: Compression) -> std::io::Result<Self> {
        let compression = match compression {
            Compression::Zstd => ParquetCompression::ZSTD(ZstdLevel::default()),
            Compression::Snappy => ParquetCompression::SNAPPY,
            Compression::None | Compression::Gzip | Compression::Deflate => ParquetCompression::UNCOMPRESSED,
        };
        let properties = WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
            .set_created_by(concat!("sluice ", env!("CARGO_PKG_VERSION")).to_string())
            .build();
        Ok(Self {
            names: Vec::new(),
            kinds: Vec::new(),
            columns: Vec::new(),
            meta: Meta::new(),
            rows: 0,
            events: 0,
            file: Some(File::create(path)?),
            writer: None,
            properties: Some(properties),
        })
    }

    /// Whether `event` fits this file: its columns are the file's (or some
    /// of them, as in a delete that carries only the key) and its values
    /// fit their types.
    pub fn accepts(&self, event: &Event) -> bool {
        if self.events == 0 {
            return true;
        }
        let Some(row) = image(event) else { return true };
        if same_columns(row, &self.names) {
            return row.values.iter().zip(&self.kinds).all(|(value, kind)| kind.is_none_or(|k| fits(k, value)));
        }
        row.columns.iter().zip(&row.values).all(|(name, value)| {
            self.names
                .iter()
                .position(|n| n == name)
                .is_some_and(|index| self.kinds[index].is_none_or(|k| fits(k, value)))
        })
    }

    pub fn push(&mut self, event: &Event) -> Result<(), SinkError> {
        let row = image(event);
        if self.events == 0 {
            self.names = row.map(|r| r.columns.to_vec()).unwrap_or_default();
            self.kinds = vec![None; self.names.len()];
            self.columns = (0..self.names.len()).map(|_| Column::Undecided(0)).collect();
        }
        self.events += 1;
        let mut unchanged: Vec<&str> = Vec::new();
        let aligned = row.is_some_and(|r| same_columns(r, &self.names));
        for (index, column) in self.columns.iter_mut().enumerate() {
            let value = match row {
                Some(r) if aligned => r.values.get(index),
                Some(r) => r.get(&self.names[index]),
                None => None,
            }
            .unwrap_or(&Value::Null);
            if matches!(value, Value::Unchanged) {
                unchanged.push(&self.names[index]);
            }
            if self.kinds[index].is_none()
                && let Some(kind) = kind_of(value)
            {
                let Column::Undecided(nulls) = column else { unreachable_column() };
                *column = builder(kind, *nulls);
                self.kinds[index] = Some(kind);
            }
            append(column, value);
        }
        let meta = &mut self.meta;
        meta.op.append_value(event.op.code());
        // Formatted straight into the column's buffer: no string per event.
        let _ = write!(meta.id, "{}", event.id());
        meta.id.append_value("");
        let _ = write!(meta.position, "{}", event.position);
        meta.position.append_value("");
        meta.tx_id.append_value(&*event.tx_id);
        meta.commit_time.append_value(event.commit_time_us);
        meta.schema_version.append_value(event.schema_version);
        match (&event.before, event.op) {
            (Some(before), Op::Update) => {
                meta.before.append_value(serde_json::to_string(before).unwrap_or_default());
            }
            _ => meta.before.append_null(),
        }
        if unchanged.is_empty() {
            meta.unchanged.append_null();
        } else {
            meta.unchanged.append_value(serde_json::to_string(&unchanged).unwrap_or_default());
        }
        self.rows += 1;
        if self.rows >= BATCH_ROWS {
            self.write_batch()?;
        }
        Ok(())
    }

    /// Bytes written to the file plus what the writer buffers.
    pub fn bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| (w.bytes_written() + w.in_progress_size()) as u64)
    }

    pub fn finish(mut self) -> Result<(), SinkError> {
        if self.rows > 0 || self.writer.is_none() {
            self.write_batch()?;
        }
        let writer = self.writer.take().ok_or_else(|| failed("the file has no writer"))?;
        let file = writer.into_inner().map_err(|e| failed(&e.to_string()))?;
        file.sync_all().map_err(|e| failed(&e.to_string()))
    }

    /// Turns the buffered rows into a record batch and hands it to the
    /// writer, fixing the file's schema on the first call.
    fn write_batch(&mut self) -> Result<(), SinkError> {
        for (kind, column) in self.kinds.iter_mut().zip(self.columns.iter_mut()) {
            if let Column::Undecided(nulls) = column {
                *column = builder(Kind::Text, *nulls);
                *kind = Some(Kind::Text);
            }
        }
        let mut fields = vec![
            Field::new(META_COLUMNS[0], DataType::Utf8, false),
            Field::new(META_COLUMNS[1], DataType::Utf8, false),
            Field::new(META_COLUMNS[2], DataType::Utf8, false),
            Field::new(META_COLUMNS[3], DataType::Utf8, false),
            Field::new(META_COLUMNS[4], DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
            Field::new(META_COLUMNS[5], DataType::UInt32, false),
            Field::new(META_COLUMNS[6], DataType::Utf8, true),
            Field::new(META_COLUMNS[7], DataType::Utf8, true),
        ];
        let meta = &mut self.meta;
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(meta.op.finish()),
            Arc::new(meta.id.finish()),
            Arc::new(meta.position.finish()),
            Arc::new(meta.tx_id.finish()),
            Arc::new(meta.commit_time.finish()),
            Arc::new(meta.schema_version.finish()),
            Arc::new(meta.before.finish()),
            Arc::new(meta.unchanged.finish()),
        ];
        for (name, column) in self.names.iter().zip(self.columns.iter_mut()) {
            let array = finish(column);
            fields.push(Field::new(name.as_ref(), array.data_type().clone(), true));
            arrays.push(array);
        }
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|e| failed(&e.to_string()))?;
        self.rows = 0;
        if self.writer.is_none() {
            let file = self.file.take().ok_or_else(|| failed("the file is gone"))?;
            let writer =
                ArrowWriter::try_new(file, schema, self.properties.take()).map_err(|e| failed(&e.to_string()))?;
            self.writer = Some(writer);
        }
        let writer = self.writer.as_mut().ok_or_else(|| failed("the file has no writer"))?;
        writer.write(&batch).map_err(|e| failed(&e.to_string()))
    }
}

fn failed(detail: &str) -> SinkError {
    SinkError::transient(format!("s3 sink: writing a Parquet file: {detail}"))
}

#[track_caller]
fn unreachable_column() -> ! {
    unreachable!("a column without a kind is undecided")
}

fn same_columns(row: &Row, names: &[Arc<str>]) -> bool {
    row.columns.len() == names.len() && row.columns.iter().zip(names).all(|(a, b)| a == b)
}

/// The row a Parquet line shows: the new image, or the old one for a delete.
fn image(event: &Event) -> Option<&Row> {
    match event.op {
        Op::Delete => event.before.as_ref(),
        _ => event.after.as_ref(),
    }
}

/// The column type a value asks for; `None` for null and unchanged.
fn kind_of(value: &Value) -> Option<Kind> {
    Some(match value {
        Value::Null | Value::Unchanged => return None,
        Value::Bool(_) => Kind::Bool,
        Value::Int(_) => Kind::Int,
        Value::UInt(_) => Kind::UInt,
        Value::Float(_) => Kind::Float,
        Value::Decimal(text) => match decimal_digits(text) {
            Some((integer, fraction)) => {
                let scale = fraction.max(MIN_DECIMAL_SCALE);
                if integer + scale <= DECIMAL_PRECISION {
                    Kind::Decimal(scale as i8)
                } else if integer + fraction <= DECIMAL_PRECISION {
                    Kind::Decimal(fraction as i8)
                } else {
                    Kind::Text
                }
            }
            None => Kind::Text,
        },
        Value::Bytes(_) => Kind::Bytes,
        Value::Date(text) if parse_iso_date(text).is_some_and(|d| i32::try_from(d).is_ok()) => Kind::Date,
        Value::Timestamp(text) if parse_iso_timestamp(text).is_some_and(|(_, zoned)| !zoned) => Kind::Timestamp,
        Value::TimestampTz(text) if parse_iso_timestamp(text).is_some() => Kind::TimestampTz,
        _ => Kind::Text,
    })
}

fn fits(kind: Kind, value: &Value) -> bool {
    match (kind, value) {
        (_, Value::Null | Value::Unchanged) | (Kind::Text, _) => true,
        (Kind::Decimal(scale), Value::Decimal(text)) => decimal_digits(text).is_some_and(|(integer, fraction)| {
            fraction <= scale as usize && integer + scale as usize <= DECIMAL_PRECISION
        }),
        (kind, value) => kind_of(value) == Some(kind),
    }
}

/// Integer and fraction digit counts of a plain decimal (`-12.50`).
fn decimal_digits(text: &str) -> Option<(usize, usize)> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    (!integer.is_empty() && digits(integer) && digits(fraction)).then(|| {
        let significant = integer.trim_start_matches('0').len();
        (significant, fraction.len())
    })
}

/// A decimal's digits scaled to `scale`, as an integer.
fn decimal_value(text: &str, scale: i8) -> Option<i128> {
    let negative = text.starts_with('-');
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (integer, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let mut digits = String::with_capacity(integer.len() + scale as usize);
    digits.push_str(integer);
    digits.push_str(fraction);
    digits.extend(std::iter::repeat_n('0', (scale as usize).checked_sub(fraction.len())?));
    let magnitude: i128 = digits.parse().ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

fn builder(kind: Kind, nulls: usize) -> Column {
    let mut column = match kind {
        Kind::Bool => Column::Bool(BooleanBuilder::new()),
        Kind::Int => Column::Int(Int64Builder::new()),
        Kind::UInt => Column::UInt(UInt64Builder::new()),
        Kind::Float => Column::Float(Float64Builder::new()),
        Kind::Decimal(scale) => Column::Decimal(
            Decimal128Builder::new()
                .with_precision_and_scale(DECIMAL_PRECISION as u8, scale)
                .unwrap_or_else(|_| Decimal128Builder::new()),
            scale,
        ),
        Kind::Text => Column::Text(StringBuilder::new()),
        Kind::Bytes => Column::Bytes(BinaryBuilder::new()),
        Kind::Date => Column::Date(Date32Builder::new()),
        Kind::Timestamp => Column::Timestamp(TimestampMicrosecondBuilder::new()),
        Kind::TimestampTz => Column::TimestampTz(TimestampMicrosecondBuilder::new().with_timezone("UTC")),
    };
    for _ in 0..nulls {
        append(&mut column, &Value::Null);
    }
    column
}

/// Appends `value`, which `fits` the column (a value that does not is
/// stored as null; `accepts` keeps that from happening).
fn append(column: &mut Column, value: &Value) {
    let null = matches!(value, Value::Null | Value::Unchanged);
    match column {
        Column::Undecided(nulls) => *nulls += 1,
        Column::Bool(b) => b.append_option(if let Value::Bool(v) = value { Some(*v) } else { None }),
        Column::Int(b) => b.append_option(if let Value::Int(v) = value { Some(*v) } else { None }),
        Column::UInt(b) => b.append_option(if let Value::UInt(v) = value { Some(*v) } else { None }),
        Column::Float(b) => b.append_option(if let Value::Float(v) = value { Some(*v) } else { None }),
        Column::Decimal(b, scale) => {
            b.append_option(if let Value::Decimal(t) = value { decimal_value(t, *scale) } else { None });
        }
        Column::Text(b) if null => b.append_null(),
        Column::Text(b) => b.append_value(value.text()),
        Column::Bytes(b) => match value {
            Value::Bytes(v) => b.append_value(v),
            _ => b.append_null(),
        },
        Column::Date(b) => b.append_option(match value {
            Value::Date(t) => parse_iso_date(t).and_then(|d| i32::try_from(d).ok()),
            _ => None,
        }),
        Column::Timestamp(b) | Column::TimestampTz(b) => b.append_option(match value {
            Value::Timestamp(t) | Value::TimestampTz(t) => parse_iso_timestamp(t).map(|(us, _)| us),
            _ => None,
        }),
    }
}

fn finish(column: &mut Column) -> ArrayRef {
    match column {
        Column::Undecided(_) => Arc::new(StringBuilder::new().finish()),
        Column::Bool(b) => Arc::new(b.finish()),
        Column::Int(b) => Arc::new(b.finish()),
        Column::UInt(b) => Arc::new(b.finish()),
        Column::Float(b) => Arc::new(b.finish()),
        Column::Decimal(b, _) => Arc::new(b.finish()),
        Column::Text(b) => Arc::new(b.finish()),
        Column::Bytes(b) => Arc::new(b.finish()),
        Column::Date(b) => Arc::new(b.finish()),
        Column::Timestamp(b) | Column::TimestampTz(b) => Arc::new(b.finish()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_keep_every_digit() {
        assert_eq!(decimal_digits("-0012.50"), Some((2, 2)));
        assert_eq!(decimal_digits("NaN"), None);
        assert_eq!(decimal_value("-12.5", 9), Some(-12_500_000_000));
        assert_eq!(decimal_value("12.1234567891", 9), None);
        assert_eq!(kind_of(&Value::Decimal("1.5".into())), Some(Kind::Decimal(9)));
        assert_eq!(kind_of(&Value::Decimal("0.1234567890123".into())), Some(Kind::Decimal(13)));
        assert!(fits(Kind::Decimal(9), &Value::Decimal("99999.123".into())));
        assert!(!fits(Kind::Decimal(9), &Value::Decimal("1.1234567891".into())));
        assert!(!fits(Kind::Decimal(9), &Value::Decimal("NaN".into())));
    }

    #[test]
    fn values_a_type_cannot_hold_fall_back_to_text() {
        assert_eq!(kind_of(&Value::Date("infinity".into())), Some(Kind::Text));
        assert_eq!(kind_of(&Value::Timestamp("2024-01-01T00:00:00".into())), Some(Kind::Timestamp));
        assert_eq!(kind_of(&Value::TimestampTz("2024-01-01T00:00:00Z".into())), Some(Kind::TimestampTz));
        assert!(fits(Kind::Text, &Value::Int(3)));
        assert!(!fits(Kind::Int, &Value::Text("3".into())));
    }
}
