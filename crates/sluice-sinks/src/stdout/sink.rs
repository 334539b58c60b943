use async_trait::async_trait;
use sluice_core::{EventChunks, Guarantee, Position, Sink, SinkError};
use sluice_format::{FormatConfig, RecordKind};
use tokio::io::AsyncWriteExt;

pub struct StdoutSink {
    id: String,
    guarantee: Guarantee,
    encoder: crate::encoded::SharedEncoder,
    out: tokio::io::Stdout,
    buf: Vec<u8>,
    written: Option<Position>,
}

impl StdoutSink {
    pub fn new(id: impl Into<String>, format: &FormatConfig, guarantee: Guarantee) -> Self {
        let id = id.into();
        Self {
            encoder: crate::encoded::SharedEncoder::new(
                format,
                super::StdoutSinkConfig::CARRIER,
                format!("stdout sink {id:?}"),
            ),
            id,
            guarantee,
            out: tokio::io::stdout(),
            buf: Vec::new(),
            written: None,
        }
    }
}

#[async_trait]
impl Sink for StdoutSink {
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        vec![sluice_core::preflight::Check::ok("target", "standard output")]
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee.clone()
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(None)
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        let io = |e| SinkError::transient_from("stdout sink: write failed", e);
        let shared = events.shared();
        while let Some(chunk) = events.next_chunk().await? {
            self.buf.clear();
            let encoding = self.encoder.chunk(shared.as_ref(), chunk).await;
            for (index, event) in chunk.iter().enumerate() {
                // Lines have no keys, so a tombstone has nothing to name.
                let records = encoding.records(&self.encoder, index, event)?;
                for record in records.iter().filter(|r| r.kind != RecordKind::Tombstone) {
                    self.buf.extend_from_slice(record.value.as_deref().unwrap_or(b"null"));
                    self.buf.push(b'\n');
                }
            }
            self.out.write_all(&self.buf).await.map_err(io)?;
        }
        self.out.flush().await.map_err(io)?;
        self.written = Some(last);
        Ok(self.written.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(self.written.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}
