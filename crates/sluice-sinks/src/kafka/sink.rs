use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use sluice_core::settings::valid_topic;
use sluice_core::{Event, EventChunks, Guarantee, Position, Sink, SinkError, SinkFenced, SliceChunks, failpoint};
use sluice_format::RecordKind;

use crate::encoded::SharedEncoder;

use super::KafkaSinkConfig;
use super::checkpoint::{ensure_topic, read_position};
use super::context::{Refusal, Watched};
use super::ledger::{Ledger, Settled};
use super::error::{Class, class_of, per_event};
use super::read_back::{ReadBack, partition_of, read_topic};
use super::record::{Placed, kafka_record};
use crate::registry::SinkSettings;
use crate::template::{Template, default_key};

/// Deliveries a write leaves pending before it waits for the oldest.
const MAX_PENDING_DELIVERIES: usize = 8192;

/// Reports each delivery to its context's ledger, from librdkafka's
/// polling thread.
type KafkaProducer = ThreadedProducer<Ledger>;

pub struct KafkaSink {
    config: KafkaSinkConfig,
    pipeline: String,
    checkpoint_key: String,
    transactional_id: String,
    topic: Template,
    key: Option<Template>,
    /// Behind a lock only because `produce` takes `&self`; one writer task
    /// owns the sink, so it is never contended.
    /// Held through a write, which encodes each chunk once for every sink
    /// of the same format.
    encoder: tokio::sync::Mutex<SharedEncoder>,
    timeout: Duration,
    producer: Option<KafkaProducer>,
    /// Refusals librdkafka reports on its own, kept by the producer's context.
    watched: Watched,
    held: Option<Position>,
    /// `exactly_once: read_back`: the topics met since the sink opened.
    read_back: std::sync::Mutex<ReadBack>,
}

impl KafkaSink {
    pub fn new(config: KafkaSinkConfig, pipeline: &str, source_id: &str) -> Self {
        let transactional_id =
            config.transactional_id.clone().unwrap_or_else(|| format!("sluice-{pipeline}-{}", config.id));
        Self {
            checkpoint_key: format!("{source_id}::sink::{}", config.id),
            topic: Template::parse(&config.topic),
            key: config.key.as_deref().map(Template::parse),
            encoder: tokio::sync::Mutex::new(SharedEncoder::new(&config.format, KafkaSinkConfig::CARRIER, format!("kafka sink {:?}", config.id))),
            timeout: Duration::from_secs(config.timeout_secs),
            pipeline: pipeline.to_string(),
            transactional_id,
            producer: None,
            watched: Watched::default(),
            held: None,
            read_back: std::sync::Mutex::new(ReadBack::default()),
            config,
        }
    }

    fn base_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in &self.config.client_conf {
            config.set(key, value);
        }
        config.set("bootstrap.servers", &self.config.brokers);
        for (key, value) in super::security::librdkafka_settings(self.config.tls.as_ref(), self.config.sasl.as_ref()) {
            config.set(key, value);
        }
        config
    }

    fn producer_config(&self) -> ClientConfig {
        let mut config = self.base_config();
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("compression.type", self.config.compression.as_str())
            .set("message.timeout.ms", (self.timeout.as_millis() as u64).to_string());
        // Measured: a short linger makes fuller produce requests. With
        // transactions too: without it, a drain of 1M rows sent three
        // times as many requests, a third the size (median 11 against 65
        // KB), and ran slower in seven of nine interleaved rounds, though
        // each transaction's last messages now wait up to 5 ms.
        if !self.config.client_conf.contains_key("linger.ms") {
            config.set("linger.ms", "5");
        }
        if self.config.reads_back() {
            // No message may be skipped: a failure stops the producer
            // rather than leave a gap, and a message never times out in
            // the queue (which would also leave one); the writer's own
            // deadline bounds a write.
            config.set("enable.gapless.guarantee", "true").set("message.timeout.ms", "0");
        }
        if self.config.transactions() {
            config
                .set("transactional.id", &self.transactional_id)
                .set("transaction.timeout.ms", (self.timeout.as_millis() as u64 * 2).to_string());
        }
        config
    }

    /// Turns a Kafka error into a sink error of the right class. A fatal
    /// producer error (fencing among them) often surfaces only as purged
    /// deliveries, so the producer's own fatal state is checked first.
    fn classify(&self, context: &str, error: KafkaError) -> SinkError {
        let fatal_state = self.producer.as_ref().and_then(|p| p.client().fatal_error());
        let code = fatal_state.as_ref().map(|(code, _)| *code).or(error.rdkafka_error_code());
        match code.map(class_of) {
            Some(Class::Fenced) => {
                return SinkError::permanent_from(
                    format!(
                        "another Sluice instance is running pipeline {:?}: kafka fenced transactional.id {:?}",
                        self.pipeline, self.transactional_id
                    ),
                    "stop the other instance; two instances of one pipeline would each write the same changes",
                    SinkFenced(Box::new(error)),
                );
            }
            // Only the checkpoint record gets here: the events' own
            // refusals become `Rejected` where the event is known.
            Some(Class::PerEvent { reason }) => {
                return SinkError::permanent_from(
                    format!("kafka: {context}: the record {reason}: {error}"),
                    "check the broker's and the topic's limits",
                    error,
                );
            }
            Some(Class::Other) | None => {}
        }
        let fatal = fatal_state.is_some()
            || match &error {
                KafkaError::Transaction(e) => e.is_fatal(),
                _ => false,
            };
        if fatal {
            SinkError::permanent_from(
                format!("kafka: {context}: {error}"),
                "the producer hit a fatal error; check the broker logs",
                error,
            )
        } else {
            SinkError::transient_from(format!("kafka: {context}: {error}"), error)
        }
    }

    fn producer(&self) -> Result<KafkaProducer, SinkError> {
        self.producer.clone().ok_or_else(|| SinkError::transient("kafka: the producer is not open"))
    }

    async fn blocking<T: Send + 'static>(
        &self,
        context: &str,
        call: impl FnOnce(KafkaProducer) -> Result<T, KafkaError> + Send + 'static,
    ) -> Result<T, SinkError> {
        let producer = self.producer()?;
        match tokio::task::spawn_blocking(move || call(producer)).await {
            Ok(result) => result.map_err(|e| self.classify(context, e)),
            Err(e) => Err(SinkError::transient_from(format!("kafka: {context}: task failed"), e)),
        }
    }

    /// `read_back`: reads back the last records of `topic`'s partitions,
    /// the first time the sink meets it.
    async fn meet(&self, topic: &str) -> Result<(), SinkError> {
        let (base, name, timeout, sink) = (self.base_config(), topic.to_string(), self.timeout, self.config.id.clone());
        let state = tokio::task::spawn_blocking(move || read_topic(&base, &name, timeout, &sink))
            .await
            .map_err(|e| SinkError::transient_from("kafka: read-back task failed", e))??;
        sluice_core::sync::lock(&self.read_back).topics.insert(topic.to_string(), state);
        Ok(())
    }

    /// Produces every record of `events`; their deliveries are left in the
    /// producer's ledger, for `settle_all`.
    async fn produce(&self, events: &mut dyn EventChunks) -> Result<(), SinkError> {
        let producer = self.producer()?;
        producer.context().forget();
        let (mut topic, mut key, mut key_text) = (String::new(), Vec::new(), String::new());
        // Each event's position goes into a header; one buffer serves them all.
        let mut position_text = String::new();
        let shared = events.shared();
        let mut encoder = self.encoder.lock().await;
        let own_keys = !encoder.defines_keys();
        while let Some(chunk) = events.next_chunk().await? {
            let encoding = encoder.chunk(shared.as_ref(), chunk).await;
            for (index, event) in chunk.iter().enumerate() {
                self.topic.render(event, &mut topic);
                if !valid_topic(&topic) {
                    return Err(SinkError::Rejected {
                        detail: format!(
                            "kafka: topic {topic:?} is not a valid topic name (template {:?}, event {} of {})",
                            self.config.topic,
                            event.id(),
                            event.table
                        ),
                        position: event.position.clone(),
                    });
                }
                // A format that defines keys (Debezium) leaves the sink's own unused.
                let native_key = match (&self.key, &event.key) {
                    _ if !own_keys => false,
                    (Some(template), _) => {
                        template.render(event, &mut key_text);
                        key.clear();
                        key.extend_from_slice(key_text.as_bytes());
                        true
                    }
                    (None, Some(row)) => {
                        default_key(row, &mut key);
                        true
                    }
                    (None, None) => false,
                };
                let records = encoding.records(&encoder, index, event)?;
                let mut id_text = [0u8; sluice_core::event::ID_LEN];
                let event_id = encoding.id(index, event).write(&mut id_text);
                position_text.clear();
                event.position.write_text(&mut |piece| position_text.push_str(piece));
                let mut transaction_topic = None;
                for (index, encoded) in records.iter().enumerate() {
                    let id = crate::encoded::record_id(event_id, records, index);
                    // BEGIN and END go to Debezium's transaction topic.
                    let topic = match encoded.kind {
                        RecordKind::Transaction => transaction_topic
                            .get_or_insert_with(|| encoder.transaction_topic(event).unwrap_or_default())
                            .as_str(),
                        _ => topic.as_str(),
                    };
                    let finished = encoder.finish(encoded, topic, event, true).await?;
                    let encoded = finished.unwrap_or(encoded);
                    let native = (own_keys && native_key).then_some(key.as_slice());
                    let placed = match self.config.reads_back() {
                        true => match self.place(topic, event, (index, &id), encoded.key.as_deref().or(native)).await? {
                            Some(placed) => Some(placed),
                            // The partition holds it already (a replay).
                            None => continue,
                        },
                        false => None,
                    };
                    let record = kafka_record(topic, event, (&id, &position_text), encoded, native, placed);
                    self.send(&producer, record, event).await?;
                }
            }
        }
        Ok(())
    }

    /// `read_back`: the partition of record `index` (id `id`) of `event`,
    /// and the headers that mark it; `None` when the partition holds it.
    async fn place(
        &self,
        topic: &str,
        event: &Event,
        (index, id): (usize, &str),
        key: Option<&[u8]>,
    ) -> Result<Option<Placed>, SinkError> {
        // A record without a key is placed by its id, which a replay keeps.
        let key = key.unwrap_or(id.as_bytes());
        for _ in 0..2 {
            if let Some(state) = sluice_core::sync::lock(&self.read_back).topics.get_mut(topic) {
                let partition = partition_of(key, state.partitions);
                if state.holds(partition, || (event.position.sort_key(), index as u32)) {
                    return Ok(None);
                }
                return Ok(Some(Placed { partition, record: index as u32, partitions: state.partitions_text.clone() }));
            }
            self.meet(topic).await?;
        }
        Err(SinkError::transient(format!("kafka: topic {topic} was not read back")))
    }

    /// Hands one record to librdkafka, waiting for room when its queue is full.
    async fn send(
        &self,
        producer: &KafkaProducer,
        record: BaseRecord<'_, [u8], [u8], usize>,
        event: &Event,
    ) -> Result<(), SinkError> {
        let ledger = producer.context();
        let mut record = Some(record);
        while let Some(mut next) = record.take() {
            next.delivery_opaque = ledger.enter(Some(event.position.clone()));
            match producer.send(next) {
                Ok(()) => {
                    // The oldest is long delivered by now; settling it keeps
                    // the ledger (a position per message) small through a
                    // write of a 300,000-row transaction, and settling in
                    // order reports a refusal as `settle_all` does.
                    if ledger.len() > MAX_PENDING_DELIVERIES {
                        self.settle_oldest(ledger).await?;
                    }
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    ledger.take_back();
                    // The local queue is full: wait for the oldest delivery.
                    if !self.settle_oldest(ledger).await? {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    record = Some(back);
                }
                Err((error, _)) => {
                    ledger.take_back();
                    return match per_event(error.rdkafka_error_code()) {
                        // librdkafka's own checks (message.max.bytes among
                        // them) refuse the message here, before any broker sees it.
                        Some(reason) => Err(rejected(event, reason, &error)),
                        None => Err(self.classify("producing", error)),
                    };
                }
            }
        }
        Ok(())
    }

    /// Waits for the oldest pending delivery; false when none is pending.
    async fn settle_oldest(&self, ledger: &Ledger) -> Result<bool, SinkError> {
        match ledger.settle_oldest().await {
            Some(settled) => self.settled(settled).map(|()| true),
            None => Ok(false),
        }
    }

    fn settled(&self, settled: Settled) -> Result<(), SinkError> {
        let error = match settled.result {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        // Not an event's: a refused checkpoint record is no event's fault.
        let Some(position) = settled.position else {
            return Err(self.classify("delivering the checkpoint", error));
        };
        match per_event(error.rdkafka_error_code()) {
            Some(reason) => {
                Err(SinkError::Rejected { detail: format!("kafka: the event {reason} (at {position}): {error}"), position })
            }
            None => Err(self.classify("delivery", error)),
        }
    }

    /// Waits for every delivery in the ledger. A refused message is
    /// reported before any other failure: in a transaction, one refusal
    /// makes the broker fail the messages after it too, and only the
    /// refused one is at fault.
    async fn settle_all(&self, ledger: &Ledger) -> Result<(), SinkError> {
        let mut first = None;
        while let Some(settled) = ledger.settle_oldest().await {
            match self.settled(settled) {
                Ok(()) => {}
                Err(rejected @ SinkError::Rejected { .. }) => return Err(rejected),
                Err(error) => {
                    first.get_or_insert(error);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    async fn write_transaction(&mut self, events: &mut dyn EventChunks, last: &Position) -> Result<(), SinkError> {
        self.blocking("begin transaction", |p| p.begin_transaction()).await?;
        self.produce(events).await?;
        let value = last.to_string();
        let producer = self.producer()?;
        let ledger = producer.context();
        let record = BaseRecord::with_opaque_to(&self.config.checkpoint_topic, ledger.enter(None))
            .key(self.checkpoint_key.as_bytes())
            .payload(value.as_bytes());
        if let Err((error, _)) = producer.send(record) {
            ledger.take_back();
            return Err(self.classify("producing the checkpoint", error));
        }
        self.settle_all(ledger).await?;
        failpoint::hit("kafka.before_commit");
        self.commit().await?;
        self.count_transaction("committed");
        failpoint::hit("kafka.after_commit");
        Ok(())
    }

    async fn commit(&self) -> Result<(), SinkError> {
        let timeout = self.timeout;
        self.blocking("commit transaction", move |p| {
            settle_reports(&p);
            p.commit_transaction(timeout)
        })
        .await
    }

    /// `sluice_kafka_transactions_total{sink, outcome}` for /metrics.
    fn count_transaction(&self, outcome: &'static str) {
        metrics::counter!("sluice_kafka_transactions_total", "sink" => self.config.id.clone(), "outcome" => outcome)
            .increment(1);
    }
}

/// Waits, briefly, for the delivery reports already seen to leave the
/// producer's count. A report's future completes inside its callback, a
/// moment before librdkafka drops it from the count; `commit_transaction`
/// first flushes, and a flush that still counts one waits for an event on
/// a queue the producer's own polling thread serves, 100 ms each time
/// (measured: a tenth of the commits here took 100 ms more, which set the
/// p99 latency). If something is still outstanding after a few
/// milliseconds, the flush waits for it as before.
fn settle_reports(producer: &KafkaProducer) {
    let start = Instant::now();
    while producer.in_flight_count() > 0 && start.elapsed() < Duration::from_millis(5) {
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn rejected(event: &Event, reason: &str, error: &KafkaError) -> SinkError {
    SinkError::Rejected {
        detail: format!("kafka: the event {reason} (at {} of {}): {error}", event.position, event.table),
        position: event.position.clone(),
    }
}

#[async_trait]
impl Sink for KafkaSink {
    fn id(&self) -> &str {
        &self.config.id
    }

    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        let mut topics = Vec::new();
        if !self.config.topic.contains("${") {
            topics.push(self.config.topic.clone());
        }
        if self.config.transactions() {
            topics.push(self.config.checkpoint_topic.clone());
        }
        let transactional_id = self.config.transactions().then(|| self.transactional_id.clone());
        let login_hint = super::security::login_hint(self.config.sasl.as_ref());
        let wanted = super::preflight::Wanted { topics, transactional_id, login_hint };
        super::preflight::checks(self.base_config(), wanted, self.timeout).await
    }

    /// A write waits for its last records' acknowledgements, or commits
    /// a transaction: a round trip whatever it holds.
    fn merges_writes(&self) -> bool {
        true
    }

    fn guarantee(&self) -> Guarantee {
        self.config.guarantee()
    }

    fn reads_back_what_it_holds(&self) -> bool {
        self.config.transactions()
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        // A new producer each time: after a failure the old one may be in
        // an error state, and init_transactions aborts what it left open.
        self.producer = None;
        // What the topics hold is read again: a failed batch may have
        // landed in part.
        sluice_core::sync::lock(&self.read_back).topics.clear();
        self.watched = Watched::default();
        let producer: KafkaProducer =
            self.producer_config().create_with_context(Ledger::new(self.watched.clone())).map_err(|e| {
            SinkError::permanent_from(
                format!("kafka sink {:?}: bad producer settings: {e}", self.config.id),
                "check client_conf",
                e,
            )
        })?;
        self.producer = Some(producer);
        let timeout = self.timeout;
        let brokers = self.config.brokers.clone();
        let connected = self.blocking("connecting", move |p| p.client().fetch_metadata(None, timeout).map(|_| ())).await;
        connected.map_err(|e| match (e, self.watched.refusal()) {
            (_, Some(Refusal::Login(reason))) => SinkError::permanent(
                format!("kafka sink {:?}: brokers {brokers} refused the login: {reason}", self.config.id),
                super::security::login_hint(self.config.sasl.as_ref()),
            ),
            (_, Some(Refusal::Tls(reason))) => SinkError::permanent(
                format!("kafka sink {:?}: the TLS handshake with brokers {brokers} failed: {reason}", self.config.id),
                "check tls.ca_file (the CA that signed the brokers' certificates) and that brokers names the hosts in them",
            ),
            (SinkError::Transient { .. }, None) => SinkError::transient(format!(
                "kafka: cannot reach brokers {brokers} within {}s; retrying (check brokers and the network)",
                timeout.as_secs()
            )),
            (permanent, None) => permanent,
        })?;
        self.encoder.lock().await.probe().await?;
        if !self.config.transactions() {
            return Ok(None);
        }
        self.blocking("init transactions", move |p| p.init_transactions(timeout)).await?;
        let base = self.base_config();
        ensure_topic(&base, &self.config.checkpoint_topic, timeout).await?;
        let (topic, key) = (self.config.checkpoint_topic.clone(), self.checkpoint_key.clone());
        let held = tokio::task::spawn_blocking(move || read_position(&base, &topic, &key, timeout))
            .await
            .map_err(|e| SinkError::transient_from("kafka: checkpoint read task failed", e))??;
        self.held = held.clone();
        Ok(held)
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let last = events.last_position().clone();
        if self.config.transactions() {
            if let Err(error) = self.write_transaction(events, &last).await {
                if error.is_transient() || matches!(error, SinkError::Rejected { .. }) {
                    // Abort so the retry, after `open`, starts clean.
                    let timeout = self.timeout;
                    if self.blocking("abort transaction", move |p| p.abort_transaction(timeout)).await.is_ok() {
                        self.count_transaction("aborted");
                    }
                }
                return Err(error);
            }
        } else {
            self.produce(events).await?;
            self.settle_all(self.producer()?.context()).await?;
        }
        self.held = Some(last);
        Ok(self.held.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        let timeout = self.timeout;
        self.blocking("flush", move |p| p.flush(timeout)).await?;
        Ok(self.held.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.producer = None;
        Ok(())
    }

    /// Produces the event alone; with transactions, in a transaction of its
    /// own that leaves the checkpoint record alone.
    async fn redeliver(&mut self, event: &Event) -> Result<(), SinkError> {
        if self.producer.is_none() {
            self.open().await?;
        }
        if self.config.reads_back() {
            // An older event written after newer ones would end a
            // partition below what it holds, and the next read-back would
            // let those newer ones be written again.
            return Err(SinkError::permanent(
                format!("kafka sink {:?}: exactly_once: read_back cannot send an earlier event again", self.config.id),
                "deliver it by hand, or purge the letter; read_back keeps each partition in stream order",
            ));
        }
        let mut one = SliceChunks::new(std::slice::from_ref(event))
            .ok_or_else(|| SinkError::transient("kafka: nothing to redeliver"))?;
        if !self.config.transactions() {
            self.produce(&mut one).await?;
            return self.settle_all(self.producer()?.context()).await;
        }
        self.blocking("begin transaction", |p| p.begin_transaction()).await?;
        let produced = match self.produce(&mut one).await {
            Ok(()) => self.settle_all(self.producer()?.context()).await,
            Err(error) => Err(error),
        };
        if let Err(error) = produced {
            let timeout = self.timeout;
            if self.blocking("abort transaction", move |p| p.abort_transaction(timeout)).await.is_ok() {
                self.count_transaction("aborted");
            }
            return Err(error);
        }
        self.commit().await?;
        self.count_transaction("committed");
        Ok(())
    }
}
