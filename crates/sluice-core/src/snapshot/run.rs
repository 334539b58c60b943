//! Runs a snapshot: readers take tables in order, each table's rows queue
//! up on their own, and one emitter hands them on table by table, so the
//! rows come out in position order however many tables are read at once.
//!
//! ```text
//! tables (in name order) ─► reader 1..N ─► queue per table ─► emitter ─► next()
//!                                                            └─ LogGuard every 10 s
//! ```

use crate::sync::lock;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::info;

use super::SnapshotPos;
use super::progress;
use crate::error::SourceError;
use crate::event::Event;
use crate::schema::{Origin, SnapshotMark};

/// Rows of one table, or why reading failed.
pub type Chunk = Result<Vec<Event>, SourceError>;
/// Where a table's rows are sent as they are read.
pub type ChunkSender = mpsc::Sender<Chunk>;
/// The encoded key of the row a read goes on after; `None` from the first row.
pub type ResumeKey = Option<Arc<[u8]>>;

/// How often the emitter logs progress and asks the guard.
const CHECK_EVERY: Duration = Duration::from_secs(10);
/// Chunks a reader may read ahead of the emitter.
const READ_AHEAD: usize = 2;

pub trait SnapshotTable: Send + Sync + 'static {
    /// The table as events name it; tables are read in this order.
    fn name(&self) -> &Arc<str>;
    /// The server's row estimate, for progress; 0 when unknown.
    fn estimated_rows(&self) -> u64;
}

/// Reads whole tables, one after another, into chunks of events.
#[async_trait]
pub trait TableReader: Send + 'static {
    type Table: SnapshotTable;

    /// Reads `table` from the row after the encoded key `after` (from the
    /// first row when `None`). Returns early when `out` is closed.
    async fn read(&mut self, table: &Self::Table, after: ResumeKey, out: &ChunkSender) -> Result<(), SourceError>;
}

/// Checks that the log position the stream will start from still exists.
#[async_trait]
pub trait LogGuard: Send + Sync + 'static {
    /// `eta` is the estimated time the snapshot still needs, when known.
    async fn check(&self, eta: Option<Duration>) -> Result<(), SourceError>;
}

/// A running snapshot; its events come out in position order.
pub struct Run {
    events: mpsc::Receiver<Chunk>,
    tasks: JoinSet<()>,
}

type Job<T> = (Arc<T>, Option<Arc<[u8]>>, mpsc::Sender<Chunk>);

impl Run {
    /// Reads `tables` (sorted by name) with the readers, skipping the
    /// tables before `resume` and the rows up to its key.
    pub fn spawn<R: TableReader>(
        source: Arc<str>,
        readers: Vec<R>,
        tables: Vec<R::Table>,
        resume: Option<SnapshotPos>,
        guard: Arc<dyn LogGuard>,
    ) -> Run {
        let (tx, events) = mpsc::channel(READ_AHEAD);
        let mut tasks = JoinSet::new();
        let mut jobs: VecDeque<Job<R::Table>> = VecDeque::new();
        let mut queues = Vec::new();
        for table in tables {
            let table = Arc::new(table);
            if resume.as_ref().is_some_and(|r| **table.name() < *r.table) {
                continue;
            }
            let after = resume.as_ref().filter(|r| r.table == *table.name()).map(|r| r.key.clone());
            let (queue_tx, queue_rx) = mpsc::channel(READ_AHEAD);
            jobs.push_back((table.clone(), after, queue_tx));
            queues.push((table as Arc<dyn SnapshotTable>, queue_rx));
        }
        // Readers take tables in order: the emitter drains them in order,
        // and a later table read first while the earliest waits would fill
        // its queue and stall the snapshot for good.
        let jobs = Arc::new(Mutex::new(jobs));
        for mut reader in readers {
            let jobs = jobs.clone();
            tasks.spawn(async move {
                loop {
                    let next = lock(&jobs).pop_front();
                    let Some((table, after, queue)) = next else { return };
                    if let Err(err) = reader.read(&table, after, &queue).await {
                        let _ = queue.send(Err(err)).await;
                        return;
                    }
                }
            });
        }
        tasks.spawn(emit(source, queues, tx, guard));
        Run { events, tasks }
    }

    /// The next rows; `None` once every table is read.
    pub async fn next(&mut self) -> Option<Chunk> {
        self.events.recv().await
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// Forwards each table's rows in table order, logs progress and asks the guard.
async fn emit(
    source: Arc<str>,
    queues: Vec<(Arc<dyn SnapshotTable>, mpsc::Receiver<Chunk>)>,
    out: mpsc::Sender<Chunk>,
    guard: Arc<dyn LogGuard>,
) {
    let _shown = progress::Shown { source: source.clone(), incremental: false };
    let total = queues.len();
    let mut rows_left: u64 = queues.iter().map(|(t, _)| t.estimated_rows()).sum();
    let started = Instant::now();
    let mut checked = Instant::now();
    let mut all_rows: u64 = 0;
    // The last chunk read, sent once the next one comes or the snapshot
    // ends: only then is it known whether its last row ends a table or the
    // snapshot, which the row's mark says.
    let mut held: Option<Vec<Event>> = None;
    for (done, (table, mut queue)) in queues.into_iter().enumerate() {
        let table_started = Instant::now();
        let mut rows: u64 = 0;
        loop {
            let chunk = queue.recv().await;
            let at_end = chunk.is_none();
            if at_end && rows > 0 {
                mark(held.as_mut().and_then(|events| events.last_mut()), SnapshotMark::LastInTable);
            }
            if let Some(mut chunk) = chunk {
                let failed = chunk.is_err();
                let count = chunk.as_ref().map_or(0, |events| events.len() as u64);
                if let Ok(events) = &mut chunk
                    && rows == 0
                {
                    let first = if all_rows == 0 { SnapshotMark::First } else { SnapshotMark::FirstInTable };
                    mark(events.first_mut(), first);
                }
                rows += count;
                all_rows += count;
                progress::Reading {
                    source: &source,
                    incremental: false,
                    table: table.name(),
                    tables: (done, total),
                    rows,
                    estimated_rows: table.estimated_rows(),
                    started: table_started.into_std(),
                }
                .show();
                let ready = match chunk {
                    Ok(events) => held.replace(events).map(Ok),
                    Err(err) => {
                        if let Some(events) = held.take() {
                            let _ = out.send(Ok(events)).await;
                        }
                        Some(Err(err))
                    }
                };
                if let Some(ready) = ready
                    && out.send(ready).await.is_err()
                {
                    return;
                }
                if failed {
                    return;
                }
            }
            if at_end || checked.elapsed() >= CHECK_EVERY {
                checked = Instant::now();
                let left = rows_left.saturating_sub(rows);
                let eta = eta(all_rows, started, left);
                progress(
                    table.as_ref(),
                    rows,
                    table_started,
                    if at_end { "snapshot of table done" } else { "snapshot progress" },
                );
                if let Err(err) = guard.check(eta).await {
                    if let Some(events) = held.take() {
                        let _ = out.send(Ok(events)).await;
                    }
                    let _ = out.send(Err(err)).await;
                    return;
                }
            }
            if at_end {
                break;
            }
        }
        rows_left = rows_left.saturating_sub(table.estimated_rows().max(rows));
        info!(tables_done = done + 1, tables = total, rows = all_rows, "snapshot progress over all tables");
    }
    if let Some(mut events) = held {
        mark(events.last_mut(), SnapshotMark::Last);
        let _ = out.send(Ok(events)).await;
    }
}

/// Raises a snapshot row's mark to `to` where that ranks higher, as
/// Debezium resolves a row that is first and last at once.
fn mark(event: Option<&mut Event>, to: SnapshotMark) {
    if let Some(Event { origin: Origin::Snapshot(mark), .. }) = event {
        *mark = (*mark).max(to);
    }
}

/// The time left at the rate so far; `None` before any row or without an estimate.
fn eta(rows: u64, started: Instant, left: u64) -> Option<Duration> {
    let secs = started.elapsed().as_secs_f64();
    (rows > 0 && secs > 0.0 && left > 0).then(|| Duration::from_secs_f64(left as f64 * secs / rows as f64))
}

fn progress(table: &dyn SnapshotTable, rows: u64, started: Instant, message: &'static str) {
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 { rows as f64 / secs } else { 0.0 };
    // An estimate of 0 means the server has none: no ETA.
    let left = table.estimated_rows().saturating_sub(rows);
    let eta_secs = if rate > 0.0 { (left as f64 / rate).round() as u64 } else { 0 };
    info!(
        table = %table.name(),
        rows,
        estimated_rows = table.estimated_rows(),
        rows_per_sec = rate.round() as u64,
        eta_secs,
        message
    );
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::event::Op;
    use crate::position::Position;
    use crate::snapshot::{KeyKind, KeyPart, decode_key, encode_key};

    struct Table {
        name: Arc<str>,
        rows: i64,
    }

    impl SnapshotTable for Table {
        fn name(&self) -> &Arc<str> {
            &self.name
        }

        fn estimated_rows(&self) -> u64 {
            self.rows as u64
        }
    }

    /// Reads rows 1..=n of a table, two per chunk, yielding between chunks
    /// so that readers interleave.
    struct Reader {
        fail_on: Option<&'static str>,
    }

    /// A snapshot row of `table` with key `id`, for tests of the snapshot's parts.
    pub(in crate::snapshot) fn row(table: &Arc<str>, id: i64) -> Event {
        Event {
            op: Op::Read,
            source_id: "s".into(),
            database: "d".into(),
            table: table.clone(),
            key: None,
            before: None,
            after: None,
            schema_version: 0,
            position: Position::Snapshot(SnapshotPos {
                table: table.clone(),
                key: encode_key(&[KeyPart::Int(id)]).into(),
                stream_from: "x".into(),
            }),
            tx_id: "snapshot".into(),
            tx_end: true,
            commit_time_us: 0,
            schema: None,
            origin: crate::schema::Origin::Snapshot(SnapshotMark::Row),
            route: None,
            shape: Default::default(),
        }
    }

    #[async_trait]
    impl TableReader for Reader {
        type Table = Table;

        async fn read(
            &mut self,
            table: &Table,
            after: Option<Arc<[u8]>>,
            out: &mpsc::Sender<Chunk>,
        ) -> Result<(), SourceError> {
            if self.fail_on == Some(&*table.name) {
                return Err(SourceError::permanent(format!("cannot read {}", table.name), "none"));
            }
            let first = match after {
                Some(key) => match decode_key(&key, &[KeyKind::Int]).as_deref() {
                    Some([KeyPart::Int(id)]) => id + 1,
                    _ => panic!("bad resume key"),
                },
                None => 1,
            };
            let mut id = first;
            while id <= table.rows {
                let chunk: Vec<Event> = (id..=(id + 1).min(table.rows)).map(|i| row(&table.name, i)).collect();
                id += chunk.len() as i64;
                if out.send(Ok(chunk)).await.is_err() {
                    return Ok(());
                }
                tokio::task::yield_now().await;
            }
            Ok(())
        }
    }

    struct Guard(Option<&'static str>);

    #[async_trait]
    impl LogGuard for Guard {
        async fn check(&self, _eta: Option<Duration>) -> Result<(), SourceError> {
            match self.0 {
                Some(why) => Err(SourceError::permanent(why, "none")),
                None => Ok(()),
            }
        }
    }

    fn tables() -> Vec<Table> {
        ["a", "b", "c", "d", "e"]
            .iter()
            .enumerate()
            .map(|(i, n)| Table { name: Arc::from(*n), rows: 7 + i as i64 })
            .collect()
    }

    async fn drain(run: &mut Run) -> (Vec<Position>, Option<SourceError>) {
        let mut positions = Vec::new();
        while let Some(chunk) = run.next().await {
            match chunk {
                Ok(events) => positions.extend(events.into_iter().map(|e| e.position)),
                Err(err) => return (positions, Some(err)),
            }
        }
        (positions, None)
    }

    #[tokio::test]
    async fn rows_come_out_in_position_order_whatever_the_number_of_readers() {
        for readers in 1..=6 {
            let list = (0..readers).map(|_| Reader { fail_on: None }).collect();
            let mut run = Run::spawn("s".into(), list, tables(), None, Arc::new(Guard(None)));
            let (positions, error) = drain(&mut run).await;
            assert!(error.is_none());
            assert_eq!(positions.len(), 7 + 8 + 9 + 10 + 11, "{readers} readers");
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "{readers} readers: out of order");
        }
    }

    /// Debezium's marks: `first` for the snapshot's first row, `last` for
    /// its last, each other table's first and last row, and an empty table
    /// or a one-row table in between.
    #[tokio::test]
    async fn rows_are_marked_first_and_last_of_their_table_and_of_the_snapshot() {
        use SnapshotMark::*;
        let table = |name: &str, rows: i64| Table { name: Arc::from(name), rows };
        let cases = [
            (vec![table("a", 3), table("b", 0), table("c", 1), table("d", 4), table("e", 0)], {
                vec![First, Row, LastInTable, LastInTable, FirstInTable, Row, Row, Last]
            }),
            (vec![table("a", 1)], vec![Last]),
            (vec![table("a", 2), table("b", 1)], vec![First, LastInTable, Last]),
        ];
        for (tables, expected) in cases {
            let mut run = Run::spawn("s".into(), vec![Reader { fail_on: None }], tables, None, Arc::new(Guard(None)));
            let mut marks = Vec::new();
            while let Some(chunk) = run.next().await {
                for event in chunk.unwrap() {
                    let Origin::Snapshot(mark) = event.origin else { panic!("not a snapshot row") };
                    marks.push(mark);
                }
            }
            assert_eq!(marks, expected);
        }
    }

    #[tokio::test]
    async fn a_resume_skips_earlier_tables_and_the_rows_up_to_its_key() {
        let resume =
            SnapshotPos { table: "c".into(), key: encode_key(&[KeyPart::Int(4)]).into(), stream_from: "x".into() };
        let list = (0..2).map(|_| Reader { fail_on: None }).collect();
        let mut run = Run::spawn("s".into(), list, tables(), Some(resume.clone()), Arc::new(Guard(None)));
        let (positions, _) = drain(&mut run).await;
        assert_eq!(positions.first(), Some(&row(&"c".into(), 5).position));
        assert_eq!(positions.len(), (9 - 4) + 10 + 11);
        assert!(positions.iter().all(|p| *p > Position::Snapshot(resume.clone())));
    }

    #[tokio::test]
    async fn a_failed_table_or_a_failed_guard_ends_the_run_with_its_error() {
        let list = (0..2).map(|_| Reader { fail_on: Some("c") }).collect();
        let mut run = Run::spawn("s".into(), list, tables(), None, Arc::new(Guard(None)));
        let (positions, error) = drain(&mut run).await;
        assert_eq!(positions.len(), 7 + 8, "the tables before the failed one are delivered");
        assert!(error.unwrap().to_string().contains("cannot read c"));
        let list = (0..2).map(|_| Reader { fail_on: None }).collect();
        let mut run = Run::spawn("s".into(), list, tables(), None, Arc::new(Guard(Some("the log is gone"))));
        let (positions, error) = drain(&mut run).await;
        assert_eq!(positions.len(), 7, "the guard is asked when the first table is done");
        assert!(error.unwrap().to_string().contains("the log is gone"));
    }
}
