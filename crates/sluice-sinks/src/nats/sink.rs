use std::collections::VecDeque;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::{self, Context};
use async_trait::async_trait;
use bytes::Bytes;
use sluice_core::{Event, EventChunks, Guarantee, Position, Sink, SinkError, failpoint};
use sluice_format::Record;

use crate::encoded::SharedEncoder;

use super::NatsSinkConfig;
use crate::registry::SinkSettings;
use crate::template::Template;

const POSITION_HEADER: &str = "Sluice-Position";
/// On each message of an event that makes several (Debezium's delete and
/// create of a key change): `<n>/<count>`.
const PART_HEADER: &str = "Sluice-Part";
/// On each message but the last of such an event: the position of the
/// event before it (empty for none), where a reopen after a crash between
/// the messages resumes.
const AFTER_HEADER: &str = "Sluice-After";
/// Publishes in flight before the oldest acknowledgement is awaited; well
/// under the client's own limit of 5,000 pending acks.
const ACK_WINDOW: usize = 1024;

pub struct NatsSink {
    config: NatsSinkConfig,
    subject: Template,
    timeout: Duration,
    jetstream: Option<Context>,
    /// The stream's last sequence, as far as this sink knows.
    last_sequence: u64,
    held: Option<Position>,
    encoder: SharedEncoder,
    /// An event a crash left half published, and how many of its messages
    /// the stream holds; those are skipped when it comes again.
    partial: Option<(Position, usize)>,
}

impl NatsSink {
    pub fn new(config: NatsSinkConfig) -> Self {
        Self {
            encoder: SharedEncoder::new(&config.format, NatsSinkConfig::CARRIER, format!("nats sink {:?}", config.id)),
            partial: None,
            subject: Template::parse(&config.subject),
            timeout: Duration::from_secs(config.timeout_secs),
            jetstream: None,
            last_sequence: 0,
            held: None,
            config,
        }
    }

    fn transient(&self, context: &str, e: impl std::fmt::Display) -> SinkError {
        SinkError::transient(format!("nats sink {:?}: {context}: {e}", self.config.id))
    }

    async fn connect(&self) -> Result<async_nats::Client, SinkError> {
        let c = &self.config;
        let mut options = async_nats::ConnectOptions::new().connection_timeout(self.timeout);
        if let Some(user) = &c.user {
            options = options.user_and_password(user.clone(), c.password.expose().to_string());
        } else if !c.token.expose().is_empty() {
            options = options.token(c.token.expose().to_string());
        } else if !c.nkey.expose().is_empty() {
            options = options.nkey(c.nkey.expose().to_string());
        } else if let Some(path) = &c.credentials_file {
            options = options.credentials_file(path).await.map_err(|e| {
                SinkError::permanent(
                    format!("nats sink {:?}: cannot read credentials_file {}: {e}", c.id, path.display()),
                    "check the path of the .creds file",
                )
            })?;
        }
        if let Some(ca) = &c.ca_file {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let (Some(cert), Some(key)) = (&c.cert_file, &c.key_file) {
            options = options.add_client_certificate(cert.clone(), key.clone()).require_tls(true);
        }
        let urls: Vec<&str> = c.url.split(',').map(str::trim).collect();
        match tokio::time::timeout(self.timeout, options.connect(urls)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(self.transient(&format!("cannot connect to {}; retrying", c.url), e)),
            Err(_) => {
                Err(self
                    .transient("connecting", format!("no answer from {} within {}s", c.url, self.timeout.as_secs())))
            }
        }
    }
}

#[async_trait]
impl Sink for NatsSink {
    /// Connects and logs in, and looks the stream up; a missing stream is
    /// only a problem without `create_stream`.
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        use sluice_core::preflight::Check;
        let client = match self.connect().await {
            Ok(client) => client,
            Err(e) => return vec![crate::preflight::outcome("server", Err::<(), _>(e), "", "check url and credentials")],
        };
        let mut checks = vec![Check::ok("server", "connected and logged in")];
        let c = &self.config;
        checks.push(match jetstream::new(client).get_stream(&c.stream).await {
            Ok(_) => Check::ok("stream", format!("{} exists", c.stream)),
            Err(_) if c.create_stream => Check::ok("stream", format!("{} is missing; the sink creates it", c.stream)),
            Err(e) => Check::fail(
                "stream",
                format!("stream {:?} is not there: {e}", c.stream),
                "create the stream, or set create_stream: true",
            ),
        });
        checks
    }

    fn id(&self) -> &str {
        &self.config.id
    }

    fn guarantee(&self) -> Guarantee {
        self.config.guarantee()
    }

    fn reads_back_what_it_holds(&self) -> bool {
        self.config.exclusive
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        self.jetstream = None;
        // An unreachable registry or refused credentials show at start.
        self.encoder.probe().await?;
        let client = self.connect().await?;
        let jetstream = jetstream::new(client);
        let c = &self.config;
        let mut stream = match jetstream.get_stream(&c.stream).await {
            Ok(stream) => stream,
            Err(_) if c.create_stream => {
                let config = jetstream::stream::Config {
                    name: c.stream.clone(),
                    subjects: c.subjects(),
                    duplicate_window: Duration::from_secs(c.duplicate_window_secs),
                    ..Default::default()
                };
                jetstream.get_or_create_stream(config).await.map_err(|e| self.transient("creating the stream", e))?
            }
            Err(e) => {
                return Err(SinkError::permanent(
                    format!("nats sink {:?}: stream {:?} is not there: {e}", c.id, c.stream),
                    "create the stream, or set create_stream: true",
                ));
            }
        };
        let state = stream.info().await.map_err(|e| self.transient("reading the stream", e))?.state.clone();
        self.last_sequence = state.last_sequence;
        self.held = None;
        self.partial = None;
        if c.exclusive && state.messages > 0 {
            let last = stream
                .get_raw_message(state.last_sequence)
                .await
                .map_err(|e| self.transient("reading the stream's last message", e))?;
            let header = |name: &str| last.headers.get(name).map(|v| v.as_str().to_string());
            let text = header(POSITION_HEADER).ok_or_else(|| {
                SinkError::permanent(
                    format!(
                        "nats sink {:?}: the last message of stream {:?} (sequence {}) was not written by Sluice",
                        c.id, c.stream, last.sequence
                    ),
                    "give this sink a stream of its own, or set exclusive: false (at-least-once)",
                )
            })?;
            let parse = |text: &str| -> Result<Position, SinkError> {
                text.parse().map_err(|e| {
                    SinkError::permanent(
                        format!("nats sink {:?}: last message holds position {text:?}: {e}", c.id),
                        "give this sink a stream of its own",
                    )
                })
            };
            let position = parse(&text)?;
            match (header(PART_HEADER).as_deref().and_then(part), header(AFTER_HEADER)) {
                (Some((published, count)), Some(after)) if published < count => {
                    self.held = if after.is_empty() { None } else { Some(parse(&after)?) };
                    self.partial = Some((position, published));
                }
                _ => self.held = Some(position),
            }
        }
        self.jetstream = Some(jetstream);
        Ok(self.held.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let jetstream = self.jetstream.clone().ok_or_else(|| SinkError::transient("nats sink is not open"))?;
        let mut subject = String::new();
        let shared = events.shared();
        while let Some(chunk) = events.next_chunk().await? {
            let encoding = self.encoder.chunk(shared.as_ref(), chunk).await;
            let mut acks = VecDeque::with_capacity(ACK_WINDOW);
            // Published back to back, so each expects the one before it.
            let mut expected = self.last_sequence;
            let mut previous = self.held.clone();
            for (at, event) in chunk.iter().enumerate() {
                self.subject.render(event, &mut subject);
                let event_id = event.id().to_string();
                let records = encoding.records(&self.encoder, at, event)?;
                let skip = match self.partial.take() {
                    Some((position, published)) if position == event.position => published,
                    _ => 0,
                };
                let count = records.len();
                for (index, record) in records.iter().enumerate().skip(skip) {
                    let id = crate::encoded::record_id(&event_id, records, index);
                    // A NATS message has no key: only the value is written.
                    let finished = self.encoder.finish(record, &subject, event, false).await?.cloned();
                    let record = finished.as_ref().unwrap_or(record);
                    let headers = self.headers(event, &id, (index, count), previous.as_ref(), expected, record);
                    let payload = Bytes::copy_from_slice(record.value.as_deref().unwrap_or_default());
                    let ack = jetstream
                        .publish_with_headers(subject.clone(), headers, payload)
                        .await
                        .map_err(|e| self.transient("publishing", e))?;
                    expected += 1;
                    acks.push_back(ack);
                    if index + 1 < count && failpoint::armed_for("nats.between_parts") {
                        while let Some(ack) = acks.pop_front() {
                            self.settle(ack).await?;
                        }
                        failpoint::hit("nats.between_parts");
                    }
                    // The client holds a publish back once 5,000 acks are
                    // pending, and an ack is only released when awaited: so
                    // await the oldest ones as we go, never all at the end.
                    if acks.len() >= ACK_WINDOW
                        && let Some(oldest) = acks.pop_front()
                    {
                        self.settle(oldest).await?;
                    }
                }
                previous = Some(event.position.clone());
            }
            while let Some(ack) = acks.pop_front() {
                self.settle(ack).await?;
            }
            self.held = previous;
        }
        // Past the last message where the pipeline's transforms dropped the
        // write's later events, or all of them: nothing is published for
        // them, and the writer keeps the higher of this and what the
        // stream's last message says on the next open.
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
        self.jetstream = None;
        Ok(())
    }
}

impl NatsSink {
    /// The headers of an event's message `part` (index, count): the id the
    /// server deduplicates by, Sluice's position, the sequence exclusive
    /// mode expects, and the format's own (binary CloudEvents).
    fn headers(
        &self,
        event: &Event,
        id: &str,
        part: (usize, usize),
        previous: Option<&Position>,
        expected: u64,
        record: &Record,
    ) -> HeaderMap {
        let (index, count) = part;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        headers.insert(POSITION_HEADER, event.position.to_string().as_str());
        if count > 1 {
            headers.insert(PART_HEADER, format!("{}/{count}", index + 1).as_str());
            if index + 1 < count {
                let after = previous.map(ToString::to_string).unwrap_or_default();
                headers.insert(AFTER_HEADER, after.as_str());
            }
        }
        if self.config.exclusive {
            headers.insert("Nats-Expected-Last-Sequence", expected.to_string().as_str());
        }
        for (name, value) in &record.headers {
            headers.insert(name.as_str(), String::from_utf8_lossy(value).as_ref());
        }
        headers
    }

    async fn settle(&mut self, ack: PublishAckFuture) -> Result<(), SinkError> {
        match tokio::time::timeout(self.timeout, ack).await {
            Ok(Ok(ack)) => self.last_sequence = self.last_sequence.max(ack.sequence),
            Ok(Err(e)) if e.to_string().contains("wrong last sequence") => {
                return Err(SinkError::permanent(
                    format!(
                        "nats sink {:?}: another writer published to stream {:?}, which exactly-once needs to itself: {e}",
                        self.config.id, self.config.stream
                    ),
                    "give this sink a stream of its own, or set exclusive: false (at-least-once)",
                ));
            }
            Ok(Err(e)) => return Err(self.transient("publish acknowledgement", e)),
            Err(_) => return Err(self.transient("publish acknowledgement", "timed out")),
        }
        Ok(())
    }
}

/// `Sluice-Part`'s `<n>/<count>`.
fn part(text: &str) -> Option<(usize, usize)> {
    let (published, count) = text.split_once('/')?;
    Some((published.parse().ok()?, count.parse().ok()?))
}
