use async_trait::async_trait;
use sluice_core::{Envelope, Event, EventChunks, Guarantee, Position, Sink, SinkError};

use super::request::{Answer, Requester};
use super::{HttpMode, HttpSinkConfig};
use crate::registry::SinkSettings;
use crate::template::{Template, percent_encode};

pub struct HttpSink {
    config: HttpSinkConfig,
    url: Template,
    requester: Option<Requester>,
    /// The last position the receiver acknowledged in this process.
    held: Option<Position>,
}

impl HttpSink {
    pub fn new(config: HttpSinkConfig) -> Self {
        Self { url: Template::parse(&config.url), requester: None, held: None, config }
    }
}

#[async_trait]
impl Sink for HttpSink {
    fn id(&self) -> &str {
        &self.config.id
    }

    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        match Requester::new(&self.config) {
            Ok(requester) => vec![requester.reach(&self.config.url).await],
            Err(e) => vec![crate::preflight::outcome("client", Err::<(), _>(e), "", "fix the sink's config")],
        }
    }

    fn guarantee(&self) -> Guarantee {
        self.config.guarantee()
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        if self.requester.is_none() {
            self.requester = Some(Requester::new(&self.config)?);
        }
        // A receiver cannot be asked what it holds; what it acknowledged in
        // this process is known, so a retry after a failure skips that.
        Ok(self.held.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let requester = self.requester.as_ref().ok_or_else(|| SinkError::transient("http sink is not open"))?;
        let batch = match self.config.mode {
            HttpMode::Single => 1,
            HttpMode::Batch => self.config.batch_max_events,
        };
        let (mut url, mut next_url) = (String::new(), String::new());
        while let Some(chunk) = events.next_chunk().await? {
            let mut start = 0;
            while start < chunk.len() {
                self.url.render_escaped(&chunk[start], &mut url, percent_encode);
                let mut end = start + 1;
                while end < chunk.len() && end - start < batch {
                    self.url.render_escaped(&chunk[end], &mut next_url, percent_encode);
                    if next_url != url {
                        break;
                    }
                    end += 1;
                }
                deliver(requester, self.config.mode, &url, &chunk[start..end], &mut self.held).await?;
                start = end;
            }
        }
        Ok(self.held.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(self.held.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.requester = None;
        Ok(())
    }

    async fn redeliver(&mut self, event: &Event) -> Result<(), SinkError> {
        if self.requester.is_none() {
            self.requester = Some(Requester::new(&self.config)?);
        }
        let requester = self.requester.as_ref().ok_or_else(|| SinkError::transient("http sink is not open"))?;
        let mut url = String::new();
        self.url.render_escaped(event, &mut url, percent_encode);
        let mut unused = None;
        deliver(requester, self.config.mode, &url, std::slice::from_ref(event), &mut unused).await
    }
}

/// Sends `events` (all for `url`) as one request. When the receiver
/// refuses a request of several events, they are sent again one by one, so
/// only the event it refuses is rejected.
async fn deliver(
    requester: &Requester,
    mode: HttpMode,
    url: &str,
    events: &[Event],
    held: &mut Option<Position>,
) -> Result<(), SinkError> {
    let Some(last) = events.last() else { return Ok(()) };
    let (body, key) = encode(mode, events)?;
    match requester.send(url, body, &key, &last.position.to_string()).await? {
        Answer::Delivered => {
            *held = Some(last.position.clone());
            Ok(())
        }
        Answer::Refused(detail) if events.len() == 1 => Err(SinkError::Rejected {
            detail: format!("the receiver refused the event: {detail}"),
            position: last.position.clone(),
        }),
        Answer::Refused(_) => {
            for event in events {
                let (body, key) = encode(mode, std::slice::from_ref(event))?;
                match requester.send(url, body, &key, &event.position.to_string()).await? {
                    Answer::Delivered => *held = Some(event.position.clone()),
                    Answer::Refused(detail) => {
                        return Err(SinkError::Rejected {
                            detail: format!("the receiver refused the event: {detail}"),
                            position: event.position.clone(),
                        });
                    }
                }
            }
            Ok(())
        }
    }
}

/// The request body and its `Idempotency-Key`.
fn encode(mode: HttpMode, events: &[Event]) -> Result<(Vec<u8>, String), SinkError> {
    let envelopes: Vec<Envelope> = events.iter().map(Envelope::new).collect();
    let encoded = match mode {
        HttpMode::Single => serde_json::to_vec(&envelopes[0]),
        HttpMode::Batch => serde_json::to_vec(&envelopes),
    };
    let body = encoded.map_err(|e| SinkError::Rejected {
        detail: format!("cannot encode the event as JSON: {e}"),
        position: events[0].position.clone(),
    })?;
    let key = match envelopes.as_slice() {
        [only] => only.id.clone(),
        [first, .., last] => format!("{}..{}", first.id, last.id),
        [] => String::new(),
    };
    Ok((body, key))
}
