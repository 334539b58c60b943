use async_trait::async_trait;
use sluice_core::{EventChunks, Guarantee, Position, Sink, SinkError};
use tokio::io::AsyncWriteExt;

pub struct StdoutSink {
    id: String,
    out: tokio::io::Stdout,
    buf: Vec<u8>,
    written: Option<Position>,
}

impl StdoutSink {
    pub fn new(id: impl Into<String>) -> Self {
        Self { id: id.into(), out: tokio::io::stdout(), buf: Vec::new(), written: None }
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
        super::StdoutSinkConfig::GUARANTEE
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(None)
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        let io = |e| SinkError::transient_from("stdout sink: write failed", e);
        while let Some(chunk) = events.next_chunk().await? {
            self.buf.clear();
            for event in chunk {
                serde_json::to_writer(&mut self.buf, event).map_err(|e| {
                    SinkError::permanent_from("stdout sink: cannot encode an event", "report this as a bug", e)
                })?;
                self.buf.push(b'\n');
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
