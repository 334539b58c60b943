//! A deterministic synthetic source.
//!
//! Every event is a pure function of (seed, transaction number, sequence
//! number), so a restart from any position replays exactly the same events
//! with the same ids. It is the quickstart's source (no database needed)
//! and the workload of the coordinator's tests and benchmarks.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sluice_config::GeneratorConfig;
use sluice_core::schema::{ColumnSchema, ColumnType, TableSchema};
use sluice_core::{
    AckWatermark, Columns, Event, Op, Position, Row, Source, SourceError, SourceStatus, Value, format_compact,
};
use tokio::time::Instant;

/// Events produced per `poll`: large enough to amortise the channel hop to
/// the coordinator, small enough to keep the first batch quick.
pub const POLL_CHUNK: usize = 1024;

/// Commit time of transaction 0: 2026-01-01T00:00:00Z. Each later
/// transaction commits one millisecond after the previous one.
const EPOCH_US: i64 = 1_767_225_600_000_000;

const STATUSES: [&str; 4] = ["new", "paid", "shipped", "cancelled"];

pub struct GeneratorSource {
    config: GeneratorConfig,
    source_id: Arc<str>,
    database: Arc<str>,
    tables: Vec<Arc<str>>,
    columns: Columns,
    key_columns: Columns,
    /// Every table's declared columns, so the typed formats (the Debezium
    /// envelope, Avro, Parquet's declared types) can write its events.
    schema: Arc<TableSchema>,
    /// The next event to produce.
    tx: u64,
    seq: u32,
    tx_id: Arc<str>,
    started: Option<(Instant, u64)>,
}

impl GeneratorSource {
    pub fn new(config: GeneratorConfig) -> Self {
        let names = ["id", "customer", "amount", "status"];
        Self {
            source_id: config.id.as_str().into(),
            database: config.database.as_str().into(),
            tables: config.tables.iter().map(|t| Arc::from(t.as_str())).collect(),
            columns: names.iter().map(|n| Arc::from(*n)).collect(),
            key_columns: vec![Arc::from("id")].into(),
            schema: Arc::new(declared_schema()),
            tx: 1,
            seq: 0,
            tx_id: "1".into(),
            started: None,
            config,
        }
    }

    /// The total number of events a finite generator produces.
    pub fn event_count(config: &GeneratorConfig) -> Option<u64> {
        config.tx_count.map(|n| n * u64::from(config.rows_per_tx))
    }

    /// The event at (tx, seq), as any run produces it.
    pub fn event_at(&self, tx: u64, seq: u32) -> Event {
        let rows = u64::from(self.config.rows_per_tx);
        let hash = mix(self.config.seed ^ mix(tx.wrapping_mul(0x9E37_79B9) ^ u64::from(seq)));
        let inserted_so_far = (tx - 1) * rows + u64::from(seq);
        let op = match (hash % 10, inserted_so_far) {
            (_, 0) | (0..=6, _) => Op::Insert,
            (7..=8, _) => Op::Update,
            _ => Op::Delete,
        };
        let id = match op {
            Op::Insert => inserted_so_far + 1,
            _ => (hash >> 8) % inserted_so_far + 1,
        };
        let table = self.tables[((tx + u64::from(seq)) % self.tables.len() as u64) as usize].clone();
        let row = |version: u64| Row {
            columns: self.columns.clone(),
            values: vec![
                Value::Int(id as i64),
                Value::Text(format_compact!("customer-{}", (hash >> 16) % 1000)),
                // Cents stay below 100 after an update's +1: two digits, as declared.
                Value::Decimal(format_compact!("{}.{:02}", (hash >> 24) % 10_000, (hash >> 40) % 99 + version)),
                Value::Text(STATUSES[((hash >> 48) % 4) as usize].into()),
            ],
        };
        let (before, after) = match op {
            Op::Insert => (None, Some(row(0))),
            Op::Update => (Some(row(0)), Some(row(1))),
            _ => (Some(row(0)), None),
        };
        Event {
            op,
            source_id: self.source_id.clone(),
            database: self.database.clone(),
            table,
            key: Some(Row { columns: self.key_columns.clone(), values: vec![Value::Int(id as i64)] }),
            before,
            after,
            schema_version: 1,
            position: Position::Generator { tx, seq },
            tx_id: if tx == self.tx { self.tx_id.clone() } else { tx.to_string().into() },
            tx_end: seq + 1 == self.config.rows_per_tx,
            commit_time_us: EPOCH_US + tx as i64 * 1000,
            schema: Some(self.schema.clone()),
            origin: sluice_core::schema::Origin::None,
            route: None,
            shape: Default::default(),
        }
    }

    fn finished(&self) -> bool {
        self.config.tx_count.is_some_and(|count| self.tx > count)
    }

    /// Sleeps until producing `count` more events keeps within the rate.
    async fn pace(&mut self, count: u64) {
        let Some(rate) = self.config.events_per_sec else {
            return;
        };
        let (start, produced) = self.started.get_or_insert_with(|| (Instant::now(), 0));
        *produced += count;
        let due = *start + Duration::from_secs_f64(*produced as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
    }
}

/// `id bigint PRIMARY KEY, customer text, amount numeric(12,2), status text`.
fn declared_schema() -> TableSchema {
    let column = |name: &str, type_name: &str, ty: ColumnType, nullable: bool| ColumnSchema {
        name: name.into(),
        type_name: type_name.into(),
        ty,
        nullable,
        default: None,
    };
    TableSchema {
        columns: vec![
            column("id", "int8", ColumnType::Int64, false),
            column("customer", "text", ColumnType::Text { length: None }, true),
            column("amount", "numeric", ColumnType::Decimal { precision: Some(12), scale: Some(2) }, true),
            column("status", "text", ColumnType::Text { length: None }, true),
        ],
        primary_key: vec![0],
    }
}

/// SplitMix64's finaliser: a cheap, well-spread hash of a u64.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[async_trait]
impl Source for GeneratorSource {
    fn id(&self) -> &str {
        &self.source_id
    }

    async fn start(&mut self, from: Option<Position>, _acked: AckWatermark) -> Result<(), SourceError> {
        // Resume at the start of the checkpoint's transaction, as a log-based
        // source would; the coordinator filters what each sink already has.
        self.tx = match from {
            None => 1,
            Some(Position::Generator { tx, .. }) => tx.max(1),
            Some(other) => {
                return Err(SourceError::permanent(
                    format!("checkpoint {other} was not written by a generator source"),
                    "give this source a new id, or reset its checkpoints with `sluice checkpoints reset`",
                ));
            }
        };
        self.seq = 0;
        self.tx_id = self.tx.to_string().into();
        self.started = None;
        Ok(())
    }

    async fn poll(&mut self, out: &mut Vec<Event>) -> Result<SourceStatus, SourceError> {
        if self.finished() {
            return Ok(SourceStatus::Ended);
        }
        let mut produced = 0;
        while produced < POLL_CHUNK && !self.finished() {
            out.push(self.event_at(self.tx, self.seq));
            produced += 1;
            self.seq += 1;
            if self.seq == self.config.rows_per_tx {
                self.seq = 0;
                self.tx += 1;
                self.tx_id = self.tx.to_string().into();
            }
        }
        self.pace(produced as u64).await;
        Ok(SourceStatus::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(tx_count: u64, rows_per_tx: u32) -> GeneratorConfig {
        GeneratorConfig {
            id: "gen".into(),
            tx_count: Some(tx_count),
            rows_per_tx,
            tables: vec!["a".into(), "b".into()],
            database: "db".into(),
            events_per_sec: None,
            seed: 7,
        }
    }

    async fn drain(source: &mut GeneratorSource) -> Vec<Event> {
        let mut all = Vec::new();
        while source.poll(&mut all).await.unwrap() == SourceStatus::Open {}
        all
    }

    #[tokio::test]
    async fn a_finite_run_produces_every_event_once_in_order() {
        let mut source = GeneratorSource::new(config(250, 7));
        source.start(None, AckWatermark::default()).await.unwrap();
        let events = drain(&mut source).await;
        assert_eq!(events.len() as u64, GeneratorSource::event_count(&config(250, 7)).unwrap());
        assert!(events.windows(2).all(|w| w[0].position < w[1].position));
        assert_eq!(events.iter().filter(|e| e.tx_end).count(), 250);
        assert!(events.iter().all(|e| e.tx_end == (e.position.seq() == 6)));
        assert!(events.iter().any(|e| e.op == Op::Update) && events.iter().any(|e| e.op == Op::Delete));
    }

    #[test]
    fn every_row_fits_its_declared_columns() {
        let source = GeneratorSource::new(config(30, 10));
        for (tx, seq) in (1..=30).flat_map(|tx| (0..10).map(move |seq| (tx, seq))) {
            let event = source.event_at(tx, seq);
            let schema = event.schema.as_deref().expect("declared columns");
            for row in [&event.before, &event.after].into_iter().flatten() {
                let names: Vec<&str> = schema.columns.iter().map(|c| &*c.name).collect();
                assert_eq!(row.columns.iter().map(|c| &**c).collect::<Vec<_>>(), names);
                // numeric(12,2): at most ten whole digits and exactly two after the point.
                let Some(Value::Decimal(amount)) = row.get("amount") else { panic!("{row:?}") };
                let (whole, cents) = amount.split_once('.').unwrap();
                assert!(whole.len() <= 10 && cents.len() == 2, "{amount}");
            }
        }
    }

    #[tokio::test]
    async fn a_restart_replays_identically_from_the_checkpoint_transaction() {
        let mut first = GeneratorSource::new(config(40, 5));
        first.start(None, AckWatermark::default()).await.unwrap();
        let all = drain(&mut first).await;
        let mut second = GeneratorSource::new(config(40, 5));
        second.start(Some(Position::Generator { tx: 17, seq: 3 }), AckWatermark::default()).await.unwrap();
        let replay = drain(&mut second).await;
        assert_eq!(replay[0].position, Position::Generator { tx: 17, seq: 0 });
        assert_eq!(&all[all.len() - replay.len()..], &replay[..]);
    }

    #[tokio::test]
    async fn a_foreign_checkpoint_is_refused() {
        let mut source = GeneratorSource::new(config(1, 1));
        let foreign = Position::Postgres { commit_lsn: sluice_core::Lsn(1), seq: 0 };
        let err = source.start(Some(foreign), AckWatermark::default()).await.unwrap_err();
        assert!(!err.is_transient());
        assert!(err.to_string().contains("not written by a generator"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_holds() {
        let mut cfg = config(1000, 10);
        cfg.events_per_sec = Some(2048);
        let mut source = GeneratorSource::new(cfg);
        source.start(None, AckWatermark::default()).await.unwrap();
        let begin = Instant::now();
        let mut out = Vec::new();
        for _ in 0..4 {
            source.poll(&mut out).await.unwrap();
        }
        // 4 chunks of 1024 events at 2048/s take two seconds of (paused) time.
        assert_eq!(begin.elapsed(), Duration::from_secs(2));
    }
}
