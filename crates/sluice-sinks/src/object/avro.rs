//! Avro object container files: Debezium's change events of one table
//! version, the file's schema made from their Connect schema. A record of
//! another schema (a DDL changed the table) begins a new file.

use std::path::Path;
use std::sync::Arc;

use sluice_core::SinkError;
use sluice_format::{AvroCodec, AvroContainer, AvroSchema, Record};

use super::Compression;
use super::jsonl::Counted;

pub(super) struct AvroFile {
    container: AvroContainer<Counted>,
    /// The Connect schema of the file's records.
    connect: Arc<str>,
}

impl AvroFile {
    pub fn create(
        path: &Path,
        compression: Compression,
        connect: Arc<str>,
        schema: Arc<AvroSchema>,
    ) -> std::io::Result<Self> {
        let codec = match compression {
            Compression::Deflate => AvroCodec::Deflate,
            Compression::Snappy => AvroCodec::Snappy,
            Compression::Zstd => AvroCodec::Zstandard,
            Compression::None | Compression::Gzip => AvroCodec::Null,
        };
        let container = AvroContainer::new(Counted::create(path)?, &schema, codec)?;
        Ok(Self { container, connect })
    }

    /// Whether `connect` is the file's schema: the same text, which the
    /// encoder shares for a table version, so the address usually says.
    pub fn holds(&self, connect: &Arc<str>) -> bool {
        Arc::ptr_eq(&self.connect, connect) || *self.connect == **connect
    }

    /// Appends a record of the file's schema, whose value is its datum.
    pub fn push(&mut self, record: &Record) -> Result<(), SinkError> {
        let Some(datum) = &record.value else { return Ok(()) };
        self.container
            .push(datum)
            .map_err(|e| SinkError::transient(format!("s3 sink: writing a staged file: {e}")))
    }

    /// Bytes in the file so far, compressed.
    pub fn bytes(&self) -> u64 {
        self.container.get_ref().bytes
    }

    /// Writes the last block and syncs the file to disk.
    pub fn finish(self) -> std::io::Result<()> {
        self.container.finish()?.sync()
    }
}
