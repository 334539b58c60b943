//! JSON Lines files, optionally gzip or zstd compressed as a whole.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use sluice_core::SinkError;

use super::Compression;

/// Counts what reaches the file, for the size limit.
pub(super) struct Counted {
    file: BufWriter<File>,
    pub(super) bytes: u64,
}

impl Counted {
    pub(super) fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self { file: BufWriter::with_capacity(256 * 1024, File::create(path)?), bytes: 0 })
    }

    /// Flushes and syncs the file to disk.
    pub(super) fn sync(self) -> std::io::Result<()> {
        self.file.into_inner().map_err(|e| e.into_error())?.sync_all()
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.file.write(buf)?;
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

enum Output {
    Plain(Counted),
    Gzip(flate2::write::GzEncoder<Counted>),
    Zstd(zstd::Encoder<'static, Counted>),
}

pub(super) struct JsonlFile {
    output: Output,
    line: Vec<u8>,
}

impl JsonlFile {
    pub fn create(path: &Path, compression: Compression) -> std::io::Result<Self> {
        let counted = Counted::create(path)?;
        let output = match compression {
            Compression::Gzip => Output::Gzip(flate2::write::GzEncoder::new(counted, flate2::Compression::default())),
            Compression::Zstd => Output::Zstd(zstd::Encoder::new(counted, 3)?),
            Compression::None | Compression::Snappy | Compression::Deflate => Output::Plain(counted),
        };
        Ok(Self { output, line: Vec::new() })
    }

    /// Appends one encoded record as a line.
    pub fn push(&mut self, value: &[u8]) -> Result<(), SinkError> {
        self.line.clear();
        self.line.extend_from_slice(value);
        self.line.push(b'\n');
        let written = match &mut self.output {
            Output::Plain(out) => out.write_all(&self.line),
            Output::Gzip(out) => out.write_all(&self.line),
            Output::Zstd(out) => out.write_all(&self.line),
        };
        written.map_err(|e| SinkError::transient(format!("s3 sink: writing a staged file: {e}")))
    }

    /// Bytes in the file so far (compressed bytes for a compressed file).
    pub fn bytes(&self) -> u64 {
        match &self.output {
            Output::Plain(out) => out.bytes,
            Output::Gzip(out) => out.get_ref().bytes,
            Output::Zstd(out) => out.get_ref().bytes,
        }
    }

    /// Ends the compression stream and syncs the file to disk.
    pub fn finish(self) -> std::io::Result<()> {
        let counted = match self.output {
            Output::Plain(out) => out,
            Output::Gzip(out) => out.finish()?,
            Output::Zstd(out) => out.finish()?,
        };
        counted.sync()
    }
}
