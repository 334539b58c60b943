//! Avro object container files: a header that holds the writer schema,
//! then blocks of datums, each compressed as a whole and ended by the
//! file's sync marker, so any Avro reader (fastavro, Spark, avro-tools)
//! reads the file with nothing else at hand.

use std::hash::{BuildHasher, Hasher};
use std::io::Write;

use super::AvroSchema;
use super::datum::{bytes, long};

/// A block is cut at about this many uncompressed bytes, as Avro's own
/// writers do; readers hold a block in memory at a time.
const BLOCK_BYTES: usize = 64 * 1024;

/// How each block is compressed (the header's `avro.codec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvroCodec {
    Null,
    Deflate,
    Snappy,
    Zstandard,
}

impl AvroCodec {
    fn name(self) -> &'static str {
        match self {
            AvroCodec::Null => "null",
            AvroCodec::Deflate => "deflate",
            AvroCodec::Snappy => "snappy",
            AvroCodec::Zstandard => "zstandard",
        }
    }
}

/// One container file being written to `out`.
pub struct AvroContainer<W: Write> {
    out: W,
    codec: AvroCodec,
    sync: [u8; 16],
    block: Vec<u8>,
    block_datums: i64,
    compressed: Vec<u8>,
}

impl<W: Write> AvroContainer<W> {
    /// Writes the header of a file of `schema`'s datums.
    pub fn new(mut out: W, schema: &AvroSchema, codec: AvroCodec) -> std::io::Result<Self> {
        let sync = marker();
        let mut header = Vec::with_capacity(schema.text().len() + 64);
        header.extend_from_slice(b"Obj\x01");
        long(2, &mut header);
        for (key, value) in [("avro.schema", schema.text()), ("avro.codec", codec.name())] {
            bytes(key.as_bytes(), &mut header);
            bytes(value.as_bytes(), &mut header);
        }
        long(0, &mut header);
        header.extend_from_slice(&sync);
        out.write_all(&header)?;
        Ok(Self {
            out,
            codec,
            sync,
            block: Vec::with_capacity(BLOCK_BYTES * 2),
            block_datums: 0,
            compressed: Vec::new(),
        })
    }

    /// Appends one datum of the file's schema.
    pub fn push(&mut self, datum: &[u8]) -> std::io::Result<()> {
        self.block.extend_from_slice(datum);
        self.block_datums += 1;
        if self.block.len() >= BLOCK_BYTES {
            self.write_block()?;
        }
        Ok(())
    }

    /// The output, which holds every block but the one being filled.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Writes the last block and hands back the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.write_block()?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write_block(&mut self) -> std::io::Result<()> {
        if self.block_datums == 0 {
            return Ok(());
        }
        self.compressed.clear();
        let data = match self.codec {
            AvroCodec::Null => &self.block,
            AvroCodec::Deflate => {
                let mut encoder = flate2::write::DeflateEncoder::new(
                    std::mem::take(&mut self.compressed),
                    flate2::Compression::default(),
                );
                encoder.write_all(&self.block)?;
                self.compressed = encoder.finish()?;
                &self.compressed
            }
            AvroCodec::Snappy => {
                self.compressed.resize(snap::raw::max_compress_len(self.block.len()) + 4, 0);
                let size = snap::raw::Encoder::new()
                    .compress(&self.block, &mut self.compressed)
                    .map_err(std::io::Error::other)?;
                // Avro's snappy blocks end with the CRC-32 of the
                // uncompressed data, big-endian.
                self.compressed.truncate(size);
                self.compressed.extend_from_slice(&crc32fast::hash(&self.block).to_be_bytes());
                &self.compressed
            }
            AvroCodec::Zstandard => {
                self.compressed = zstd::bulk::compress(&self.block, 3)?;
                &self.compressed
            }
        };
        let mut head = Vec::with_capacity(20);
        long(self.block_datums, &mut head);
        long(data.len() as i64, &mut head);
        self.out.write_all(&head)?;
        self.out.write_all(data)?;
        self.out.write_all(&self.sync)?;
        self.block.clear();
        self.block_datums = 0;
        Ok(())
    }
}

/// The 16 bytes that end each block: random, so no datum is likely to
/// hold them, which lets a reader find block boundaries.
fn marker() -> [u8; 16] {
    let random = || std::collections::hash_map::RandomState::new().build_hasher().finish();
    let mut sync = [0; 16];
    sync[..8].copy_from_slice(&random().to_le_bytes());
    sync[8..].copy_from_slice(&random().to_le_bytes());
    sync
}
