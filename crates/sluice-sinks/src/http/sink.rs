use async_trait::async_trait;
use sluice_core::{Envelope, Event, EventChunks, Guarantee, Position, Sink, SinkError};

use sluice_format::Envelope as Format;

use crate::encoded::{Encoding, SharedEncoder};

use super::request::{Answer, Request, Requester};
use super::{HttpMode, HttpSinkConfig};
use crate::registry::SinkSettings;
use crate::template::{Template, percent_encode};

pub struct HttpSink {
    config: HttpSinkConfig,
    url: Template,
    requester: Option<Requester>,
    /// The last position the receiver acknowledged in this process.
    held: Option<Position>,
    bodies: Bodies,
}

impl HttpSink {
    pub fn new(config: HttpSinkConfig) -> Self {
        let bodies = Bodies {
            mode: config.mode,
            envelope: config.format.envelope,
            encoder: SharedEncoder::new(&config.format, HttpSinkConfig::CARRIER, format!("http sink {:?}", config.id)),
            chunk: None,
        };
        Self { url: Template::parse(&config.url), requester: None, held: None, bodies, config }
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
        self.bodies.encoder.probe().await?;
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
        let shared = events.shared();
        while let Some(chunk) = events.next_chunk().await? {
            if self.bodies.envelope != Format::Native {
                self.bodies.chunk = Some(self.bodies.encoder.chunk(shared.as_ref(), chunk).await);
            }
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
                deliver(requester, &mut self.bodies, &url, (&chunk[start..end], Some(start)), &mut self.held).await?;
                start = end;
            }
        }
        self.bodies.chunk = None;
        // Past the last request where the pipeline's transforms dropped
        // the write's later events, or all of them.
        let end = events.last_position();
        if self.held.as_ref().is_none_or(|held| held < end) {
            self.held = Some(end.clone());
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
        deliver(requester, &mut self.bodies, &url, (std::slice::from_ref(event), None), &mut unused).await
    }
}

/// Sends `events` (all for `url`): one request in batch mode, one per
/// record in single mode. When the receiver refuses a request of several
/// events, they are sent again one by one, so only the event it refuses is
/// rejected.
async fn deliver(
    requester: &Requester,
    bodies: &mut Bodies,
    url: &str,
    (events, at): (&[Event], Option<usize>),
    held: &mut Option<Position>,
) -> Result<(), SinkError> {
    let Some(last) = events.last() else { return Ok(()) };
    let position = last.position.to_string();
    let mut refused = None;
    for request in bodies.requests(events, at).await? {
        if let Answer::Refused(detail) = requester.send(url, request, &position).await? {
            refused = Some(detail);
            break;
        }
    }
    match refused {
        None => {
            *held = Some(last.position.clone());
            Ok(())
        }
        Some(detail) if events.len() == 1 => Err(SinkError::Rejected {
            detail: format!("the receiver refused the event: {detail}"),
            position: last.position.clone(),
        }),
        Some(_) => {
            for (i, event) in events.iter().enumerate() {
                let position = event.position.to_string();
                for request in bodies.requests(std::slice::from_ref(event), at.map(|at| at + i)).await? {
                    if let Answer::Refused(detail) = requester.send(url, request, &position).await? {
                        return Err(SinkError::Rejected {
                            detail: format!("the receiver refused the event: {detail}"),
                            position: event.position.clone(),
                        });
                    }
                }
                *held = Some(event.position.clone());
            }
            Ok(())
        }
    }
}

/// Turns events into request bodies in the sink's format.
struct Bodies {
    mode: HttpMode,
    envelope: Format,
    encoder: SharedEncoder,
    /// The records of the chunk being written, shared with the other
    /// sinks of the same format.
    chunk: Option<Encoding>,
}

impl Bodies {
    /// The requests that carry `events`. The native envelope keeps its
    /// shape: an event, or an array of them. Other formats send each record
    /// alone in single mode, or their values as one JSON array in batch
    /// mode; an event the format leaves out sends nothing. Avro sends each
    /// record alone, as a datum framed with its schema's registry id.
    ///
    /// `at` is where `events` start in the chunk being written, whose
    /// records are at hand; without it (a dead letter sent again) each
    /// event is encoded here.
    async fn requests(&mut self, events: &[Event], at: Option<usize>) -> Result<Vec<Request>, SinkError> {
        if self.envelope == Format::Native {
            return native(self.mode, events).map(|request| vec![request]);
        }
        let mut requests = Vec::new();
        let mut batch: Vec<(String, Vec<u8>)> = Vec::new();
        let mut own = Vec::new();
        for (i, event) in events.iter().enumerate() {
            let event_id = event.id().to_string();
            let records = match (&self.chunk, at) {
                (Some(chunk), Some(at)) => chunk.records(&self.encoder, at + i, event)?,
                _ => {
                    own.clear();
                    crate::encoded::encode(self.encoder.encoder(), "http sink", event, &event_id, &mut own)?;
                    &own[..]
                }
            };
            for (index, record) in records.iter().enumerate() {
                let key = crate::encoded::record_id(&event_id, records, index).into_owned();
                let topic = self.encoder.topic(event, record).unwrap_or_default();
                if let Some(avro) = self.encoder.finish(record, &topic, event, false).await? {
                    let body = avro.value.clone().unwrap_or_default();
                    requests.push(Request { body, key, content_type: "application/octet-stream", headers: Vec::new() });
                    continue;
                }
                let value = record.value.clone().unwrap_or_default();
                match self.mode {
                    HttpMode::Batch => batch.push((key, value)),
                    HttpMode::Single => requests.push(single(self.envelope, key, value, record.headers.clone())),
                }
            }
        }
        if let (Some((first, _)), Some((last, _))) = (batch.first(), batch.last()) {
            let key = if batch.len() == 1 { first.clone() } else { format!("{first}..{last}") };
            let mut body = Vec::with_capacity(batch.iter().map(|(_, v)| v.len() + 1).sum::<usize>() + 2);
            for (i, (_, value)) in batch.iter().enumerate() {
                body.push(if i == 0 { b'[' } else { b',' });
                body.extend_from_slice(value);
            }
            body.push(b']');
            let content_type = match self.envelope {
                Format::Cloudevents => "application/cloudevents-batch+json",
                _ => "application/json",
            };
            requests.push(Request { body, key, content_type, headers: Vec::new() });
        }
        Ok(requests)
    }
}

/// One record as a request of its own: a structured CloudEvent says so in
/// its content type; a binary one carries its attributes as `ce-` headers.
fn single(envelope: Format, key: String, body: Vec<u8>, attributes: Vec<(String, Vec<u8>)>) -> Request {
    let binary = !attributes.is_empty();
    let content_type = match envelope {
        Format::Cloudevents if !binary => "application/cloudevents+json",
        _ => "application/json",
    };
    // The content type is the sink's to set; the binding's header for the
    // attribute says the same thing.
    let headers = attributes.into_iter().filter(|(name, _)| !name.eq_ignore_ascii_case("content-type")).collect();
    Request { body, key, content_type, headers }
}

/// The native request body and its `Idempotency-Key`.
fn native(mode: HttpMode, events: &[Event]) -> Result<Request, SinkError> {
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
        [only] => only.id.to_string(),
        [first, .., last] => format!("{}..{}", first.id, last.id),
        [] => String::new(),
    };
    Ok(Request { body, key, content_type: "application/json", headers: Vec::new() })
}
