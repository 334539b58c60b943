use std::sync::Arc;

use super::*;
use crate::event::Op;
use crate::position::Lsn;

/// A table of ids 1..=rows, read two per chunk; remembers the marks.
/// Its reads do not see transaction `unseen_tx`; remembers what each
/// read waited to see.
struct Fake {
    rows: i64,
    next: i64,
    marks: Vec<(String, String)>,
    unseen_tx: &'static str,
    waited: Vec<Vec<String>>,
}

impl Fake {
    fn new(rows: i64) -> Self {
        Self { rows, next: 0, marks: Vec::new(), unseen_tx: "", waited: Vec::new() }
    }
}

fn row(table: &str, op: Op, id: i64, lsn: u64) -> Event {
    let key = Row { columns: Arc::from(vec![Arc::from("id")]), values: vec![Value::Int(id)] };
    Event {
        op,
        source_id: "src".into(),
        database: "db".into(),
        table: table.into(),
        key: Some(key.clone()),
        before: None,
        after: Some(key),
        schema_version: 1,
        position: Position::Postgres { commit_lsn: Lsn(lsn), seq: 0 },
        tx_id: "t".into(),
        tx_end: true,
        commit_time_us: 0,
        schema: None,
        origin: crate::schema::Origin::None,
        route: None,
        shape: Default::default(),
    }
}

#[async_trait]
impl ChunkReader for Fake {
    async fn open(&mut self, table: &str, after: Option<&[u8]>) -> Result<Result<u64, String>, SourceError> {
        if table != "public.t" {
            return Ok(Err("no such table".into()));
        }
        self.next = after.map_or(1, |k| i64::from_be_bytes(k.try_into().unwrap()) + 1);
        Ok(Ok(self.rows as u64))
    }

    async fn read_chunk(&mut self, low: &str, high: &str) -> Result<ChunkRows, SourceError> {
        self.marks.push((low.into(), high.into()));
        let ids: Vec<i64> = (self.next..=self.rows).take(2).collect();
        self.next += ids.len() as i64;
        Ok(ChunkRows {
            rows: ids.iter().map(|id| row("public.t", Op::Read, *id, 0)).collect(),
            last_key: ids.last().map(|id| id.to_be_bytes().to_vec()),
            full: ids.len() == 2,
        })
    }

    fn unseen(&self, tx_id: &str) -> bool {
        tx_id == self.unseen_tx
    }

    async fn wait_visible(&mut self, tx_ids: &[Arc<str>]) -> Result<(), SourceError> {
        self.waited.push(tx_ids.iter().map(|tx| tx.to_string()).collect());
        Ok(())
    }
}

fn marked(kind: &str, content: &str, lsn: u64) -> Event {
    let mut event = row(kind, Op::Message, 0, lsn);
    event.after = Some(Row {
        columns: Arc::from(vec![Arc::from("prefix"), Arc::from("content")]),
        values: vec![Value::Text(kind.into()), Value::Text(content.into())],
    });
    event
}

fn mark(event: &Event) -> Option<Mark> {
    let content = text_at(event, 1)?.to_string();
    match &*event.table {
        "signal" => Some(Mark::Signal(content)),
        "watermark" => Some(Mark::Watermark(content)),
        _ => None,
    }
}

fn ids(events: &[Event]) -> Vec<(Op, i64)> {
    events
        .iter()
        .map(|e| {
            let Some(Value::Int(id)) = e.key.as_ref().map(|k| k.values[0].clone()) else { panic!() };
            (e.op, id)
        })
        .collect()
}

#[tokio::test]
async fn a_row_changed_before_the_low_watermark_by_a_transaction_the_read_did_not_see_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake { unseen_tx: "late", ..Fake::new(2) };
    let mut incremental = Incremental::open(fake, "src", crate::StateDir::files(dir.path()), None).unwrap();
    let mut out = Vec::new();
    let signal = marked("signal", r#"{"source":"src","table":"public.t"}"#, 10);
    incremental.filter(vec![signal], &mut out, mark).await.unwrap();
    let (low, high) = incremental.reader.marks[0].clone();
    let late = Event { tx_id: "late".into(), ..row("public.t", Op::Update, 2, 11) };
    let events = vec![late, marked("watermark", &low, 12), marked("watermark", &high, 13)];
    incremental.filter(events, &mut out, mark).await.unwrap();
    assert_eq!(ids(&out), vec![(Op::Update, 2), (Op::Read, 1)], "row 2 as the read held it would be stale");
}

#[tokio::test]
async fn each_read_first_waits_to_see_the_transactions_already_handed_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut incremental = Incremental::open(Fake::new(4), "src", crate::StateDir::files(dir.path()), None).unwrap();
    let mut out = Vec::new();
    let early = Event { tx_id: "early".into(), ..row("public.other", Op::Insert, 9, 9) };
    let signal = marked("signal", r#"{"source":"src","table":"public.t"}"#, 10);
    incremental.filter(vec![early, signal], &mut out, mark).await.unwrap();
    let (low, high) = incremental.reader.marks[0].clone();
    let late = Event { tx_id: "late".into(), ..row("public.t", Op::Update, 3, 12) };
    let events = vec![marked("watermark", &low, 11), late, marked("watermark", &high, 13)];
    incremental.filter(events, &mut out, mark).await.unwrap();
    assert_eq!(incremental.reader.waited, vec![vec!["early"], vec!["early", "late"]]);
}

#[tokio::test]
async fn a_row_changed_between_the_watermarks_is_left_out_and_a_restart_reads_unheld_chunks_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = crate::StateDir::files(dir.path());
    let fake = Fake::new(3);
    let mut incremental = Incremental::open(fake, "src", state.clone(), None).unwrap();
    let mut out = Vec::new();
    let signal = marked("signal", r#"{"source":"src","table":"public.t"}"#, 10);
    incremental.filter(vec![signal.clone()], &mut out, mark).await.unwrap();
    assert!(out.is_empty(), "a signal never reaches the sinks");
    let (low, high) = incremental.reader.marks[0].clone();
    // Row 2 changes between the watermarks; row 1 changed before them.
    let events = vec![
        row("public.t", Op::Update, 1, 11),
        marked("watermark", &low, 12),
        row("public.t", Op::Update, 2, 13),
        marked("watermark", &high, 14),
    ];
    incremental.filter(events, &mut out, mark).await.unwrap();
    let seen: Vec<(Op, i64, String)> = out
        .iter()
        .map(|e| {
            let Some(Value::Int(id)) = e.key.as_ref().map(|k| k.values[0].clone()) else { panic!() };
            (e.op, id, e.position.to_string())
        })
        .collect();
    assert_eq!(
        seen,
        vec![(Op::Update, 1, "pg:0/B:0".into()), (Op::Update, 2, "pg:0/D:0".into()), (Op::Read, 1, "pg:0/E:0".into()),]
    );
    assert!(out[2].tx_end);
    // The second chunk is read; a replayed signal is not taken again.
    assert_eq!(incremental.reader.marks.len(), 2);
    incremental.filter(vec![signal], &mut out, mark).await.unwrap();
    assert_eq!(incremental.reader.marks.len(), 2);
    // A restart whose sinks hold nothing of the first chunk reads it again.
    let fake = Fake::new(3);
    let mut again =
        Incremental::open(fake, "src", state.clone(), Some(&Position::Postgres { commit_lsn: Lsn(13), seq: 0 }))
            .unwrap();
    again.filter(Vec::new(), &mut out, mark).await.unwrap();
    assert_eq!(again.reader.next, 3, "read from row 1 again, two rows");
    // One whose sinks hold it goes on after it.
    let fake = Fake::new(3);
    let mut on =
        Incremental::open(fake, "src", state, Some(&Position::Postgres { commit_lsn: Lsn(14), seq: 0 })).unwrap();
    on.filter(Vec::new(), &mut out, mark).await.unwrap();
    assert_eq!(on.reader.next, 4, "read on from row 3");
}

#[tokio::test]
async fn a_running_incremental_snapshot_shows_its_rows_and_its_end_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let shown =
        || crate::snapshot::progress::running().into_iter().find(|p| &*p.source == "progress-src" && p.incremental);
    let mut incremental =
        Incremental::open(Fake::new(3), "progress-src", crate::StateDir::files(dir.path()), None).unwrap();
    let mut out = Vec::new();
    let signal = marked("signal", r#"{"source":"progress-src","table":"public.t"}"#, 10);
    incremental.filter(vec![signal], &mut out, mark).await.unwrap();
    let first = shown().expect("shown once the table is opened");
    assert_eq!((&*first.table, first.rows, first.estimated_rows, first.tables), ("public.t", 0, 3, 1));
    let (low, high) = incremental.reader.marks[0].clone();
    incremental
        .filter(vec![marked("watermark", &low, 11), marked("watermark", &high, 12)], &mut out, mark)
        .await
        .unwrap();
    assert_eq!(shown().map(|p| p.rows), Some(2), "the first chunk's two rows");
    let (low, high) = incremental.reader.marks[1].clone();
    incremental
        .filter(vec![marked("watermark", &low, 13), marked("watermark", &high, 14)], &mut out, mark)
        .await
        .unwrap();
    assert_eq!(shown(), None, "the last chunk ends the snapshot");
    let ended = crate::snapshot::progress::ended().into_iter().rfind(|e| &*e.source == "progress-src").unwrap();
    assert_eq!((&*ended.table, ended.rows, ended.refused), ("public.t", 3, None));
}
