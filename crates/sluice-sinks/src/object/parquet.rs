//! Parquet files: the row image in typed columns, plus the event's lineage.
//!
//! Each column's type is the source's declared type where events carry
//! it, else comes from the column's first non-null value (see `columns`),
//! and stays for the file: an event whose values do not fit (another
//! type, a wider decimal scale, other columns) or whose table changed its
//! declared types makes the sink start a new file (see `accepts`).

use std::fmt::Write as _;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{StringBuilder, TimestampMicrosecondBuilder, UInt32Builder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as ParquetCompression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use sluice_core::{Event, Op, Row, Shape, SinkError, TableSchema, Value};

use super::Compression;
use super::columns::{Column, Kind, append, builder, declared, finish, fits, inferred};

/// Rows per record batch handed to the Parquet writer.
const BATCH_ROWS: usize = 8192;
/// Rows per row group.
const ROW_GROUP_ROWS: usize = 128 * 1024;
/// A row group is also cut at about this many buffered bytes, which bounds
/// the writer's memory whatever the row width.
const ROW_GROUP_BYTES: usize = 32 * 1024 * 1024;

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
    /// The declared types of the file's columns, where events carry them.
    declared: Option<Arc<TableSchema>>,
    /// Each column's kind, once declared or seen in a value.
    kinds: Vec<Option<Kind>>,
    /// The kinds the declared types ask for.
    wanted: Vec<Option<Kind>>,
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
            declared: None,
            kinds: Vec::new(),
            wanted: Vec::new(),
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
        if let (Some(file), Some(event)) = (&self.declared, &event.schema)
            && !(Arc::ptr_eq(file, event) || file == event)
        {
            return false;
        }
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
            self.declared = event.schema.clone().filter(|schema| {
                schema.columns.len() == self.names.len()
                    && schema.columns.iter().zip(&self.names).all(|(column, name)| column.name == *name)
            });
            self.wanted = match &self.declared {
                Some(schema) => schema.columns.iter().map(|c| declared(&c.ty)).collect(),
                None => vec![None; self.names.len()],
            };
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
            if self.kinds[index].is_none() {
                // The declared type, unless this first value does not fit
                // it; then the value's own kind, which it fits.
                let kind = match self.wanted[index] {
                    Some(kind) if fits(kind, value) => Some(kind),
                    _ => inferred(value),
                };
                if let Some(kind) = kind {
                    let Column::Undecided(nulls) = column else { unreachable_column() };
                    *column = builder(kind, *nulls);
                    self.kinds[index] = Some(kind);
                }
            }
            append(column, self.kinds[index].unwrap_or(Kind::Text), value);
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
        for ((kind, wanted), column) in self.kinds.iter_mut().zip(&self.wanted).zip(self.columns.iter_mut()) {
            if let Column::Undecided(nulls) = column {
                let chosen = wanted.unwrap_or(Kind::Text);
                *column = builder(chosen, *nulls);
                *kind = Some(chosen);
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
        for ((name, column), kind) in self.names.iter().zip(self.columns.iter_mut()).zip(&self.kinds) {
            let (field, array) = finish(name, column, *kind);
            fields.push(field);
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

/// The row a Parquet line shows: the new image, or the old one for a
/// delete; a flat row (`unwrap`) is its `after`, a rewritten delete too.
fn image(event: &Event) -> Option<&Row> {
    match (&event.shape, event.op) {
        (Shape::Row(_), _) => event.after.as_ref(),
        (_, Op::Delete) => event.before.as_ref(),
        _ => event.after.as_ref(),
    }
}
