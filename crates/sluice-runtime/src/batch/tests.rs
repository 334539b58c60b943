use super::*;
use sluice_core::Op;

/// Events of transactions with the given sizes.
fn stream(sizes: &[u32]) -> Vec<Event> {
    let mut events = Vec::new();
    for (index, size) in sizes.iter().enumerate() {
        let tx = index as u64 + 1;
        for seq in 0..*size {
            events.push(Event {
                op: Op::Insert,
                source_id: "s".into(),
                database: "d".into(),
                table: "t".into(),
                key: None,
                before: None,
                after: None,
                schema_version: 1,
                position: Position::Generator { tx, seq },
                tx_id: tx.to_string().into(),
                tx_end: seq + 1 == *size,
                commit_time_us: 0,
                schema: None,
                origin: sluice_core::schema::Origin::None,
                route: None,
                shape: Default::default(),
            });
        }
    }
    events
}

fn limits(max_events: usize, respect_source_tx: bool) -> BatchConfig {
    BatchConfig { max_events, respect_source_tx, ..BatchConfig::default() }
}

fn batcher(limits: BatchConfig) -> (Batcher, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (Batcher::new(limits, dir.path().join("spill")), dir)
}

fn sizes(batcher: &mut Batcher, events: Vec<Event>) -> Vec<usize> {
    let mut batches: Vec<_> = events.into_iter().filter_map(|e| batcher.push(e).unwrap()).collect();
    batches.extend(batcher.finish());
    batches.iter().map(|b| b.events().unwrap().len()).collect()
}

async fn read_all(batch: &Batch, after: Option<&Position>) -> Vec<Position> {
    match batch.chunks(after).unwrap() {
        None => Vec::new(),
        Some(mut chunks) => {
            let events = sluice_core::collect_chunks(&mut chunks).await.unwrap();
            events.into_iter().map(|e| e.position).collect()
        }
    }
}

#[test]
fn cuts_at_the_last_whole_transaction() {
    let (mut batcher, _dir) = batcher(limits(4, true));
    assert_eq!(sizes(&mut batcher, stream(&[3, 3, 2])), [3, 3, 2]);
}

#[test]
fn a_transaction_larger_than_the_limit_grows_one_batch() {
    let (mut batcher, _dir) = batcher(limits(2, true));
    assert_eq!(sizes(&mut batcher, stream(&[1, 7, 1])), [1, 7, 1]);
}

#[test]
fn without_respect_for_transactions_batches_are_exact() {
    let (mut batcher, _dir) = batcher(limits(4, false));
    assert_eq!(sizes(&mut batcher, stream(&[3, 3, 3])), [4, 4, 1]);
}

#[test]
fn finish_drops_a_trailing_partial_transaction() {
    let (mut batcher, _dir) = batcher(limits(100, true));
    let mut events = stream(&[2, 3]);
    events.pop();
    assert_eq!(sizes(&mut batcher, events), [2]);
}

#[test]
fn byte_limit_cuts_too() {
    let (mut batcher, _dir) = batcher(BatchConfig { max_bytes: 1, respect_source_tx: false, ..BatchConfig::default() });
    assert_eq!(sizes(&mut batcher, stream(&[2, 2])), [1, 1, 1, 1]);
}

#[tokio::test]
async fn chunks_hold_the_suffix_after_a_position() {
    let (mut batcher, _dir) = batcher(limits(100, true));
    for event in stream(&[3, 3]) {
        assert!(batcher.push(event).unwrap().is_none());
    }
    let batch = batcher.finish().unwrap();
    assert_eq!(read_all(&batch, None).await.len(), 6);
    assert_eq!(read_all(&batch, Some(&Position::Generator { tx: 1, seq: 1 })).await.len(), 4);
    assert!(batch.chunks(Some(&Position::Generator { tx: 9, seq: 0 })).unwrap().is_none());
    assert_eq!(batch.first(), &Position::Generator { tx: 1, seq: 0 });
    assert_eq!(batch.last(), &Position::Generator { tx: 2, seq: 2 });
}

#[tokio::test]
async fn a_large_batch_in_memory_goes_out_in_pieces_in_order() {
    let (mut batcher, _dir) = batcher(limits(10, true));
    let events = stream(&[2 * MEMORY_CHUNK_EVENTS as u32 + 5]);
    let expected: Vec<Position> = events.iter().skip(1).map(|e| e.position.clone()).collect();
    let batch = events.into_iter().find_map(|e| batcher.push(e).unwrap()).or_else(|| batcher.finish()).unwrap();
    let mut chunks = batch.chunks(Some(&Position::Generator { tx: 1, seq: 0 })).unwrap().unwrap();
    assert_eq!(chunks.event_count(), expected.len());
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    while let Some(chunk) = chunks.next_chunk().await.unwrap() {
        sizes.push(chunk.len());
        seen.extend(chunk.iter().map(|e| e.position.clone()));
    }
    assert_eq!(sizes, [MEMORY_CHUNK_EVENTS, MEMORY_CHUNK_EVENTS, 4]);
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_transaction_past_max_bytes_spills_to_disk_and_reads_back_whole() {
    let (mut batcher, dir) = batcher(BatchConfig { max_events: 10, max_bytes: 2_000, ..BatchConfig::default() });
    let events = stream(&[2, 5_000, 3]);
    let expected: Vec<Position> = events.iter().map(|e| e.position.clone()).collect();
    let mut batches: Vec<_> = events.into_iter().filter_map(|e| batcher.push(e).unwrap()).collect();
    batches.extend(batcher.finish());
    let spilled: Vec<bool> = batches.iter().map(|b| b.is_spilled()).collect();
    assert_eq!(spilled, [false, true, false]);
    assert_eq!(batches[1].event_count(), 5_000);
    assert!(batcher.current.capacity() <= 64, "the heap does not hold the big transaction");
    let mut read = Vec::new();
    for batch in &batches {
        read.extend(read_all(batch, None).await);
    }
    assert_eq!(read, expected);
    let inside = Position::Generator { tx: 2, seq: 4_000 };
    assert_eq!(read_all(&batches[1], Some(&inside)).await.len(), 999);
    assert_eq!(std::fs::read_dir(dir.path().join("spill")).unwrap().count(), 1);
    drop(batches);
    assert_eq!(std::fs::read_dir(dir.path().join("spill")).unwrap().count(), 0, "spill files go with their batch");
}

#[test]
fn an_unfinished_spilled_transaction_is_dropped_at_finish() {
    let (mut batcher, dir) = batcher(BatchConfig { max_bytes: 500, ..BatchConfig::default() });
    let mut events = stream(&[50]);
    events.pop();
    for event in events {
        assert!(batcher.push(event).unwrap().is_none());
    }
    assert!(batcher.deadline().is_none(), "no age cut while a transaction spills");
    assert!(batcher.finish().is_none());
    assert_eq!(std::fs::read_dir(dir.path().join("spill")).unwrap().count(), 0);
}

#[test]
fn age_deadline_exists_only_while_a_batch_is_open() {
    let (mut batcher, _dir) = batcher(limits(100, true));
    assert!(batcher.deadline().is_none());
    let mut events = stream(&[2]).into_iter();
    assert!(batcher.push(events.next().unwrap()).unwrap().is_none());
    assert!(batcher.deadline().is_some());
    assert!(batcher.on_deadline().is_none(), "mid-transaction: nothing to cut yet");
    assert!(batcher.deadline().is_none(), "no timer while waiting for the transaction end");
    let batch = batcher.push(events.next().unwrap()).unwrap().expect("the transaction end cuts the overdue batch");
    assert_eq!(batch.event_count(), 2);
    assert!(batcher.deadline().is_none());
}

fn dropping_inserts() -> Arc<Transforms> {
    let filter = sluice_transform::TransformConfig::Filter(sluice_transform::FilterConfig {
        action: sluice_transform::FilterAction::Drop,
        ops: vec!["c".into()],
        tables: Vec::new(),
        conditions: Vec::new(),
    });
    Arc::new(Transforms::build(&[filter]).unwrap())
}

#[tokio::test]
async fn a_batch_whose_events_were_all_dropped_keeps_its_span_and_has_no_chunk() {
    let (batcher, _dir) = batcher(limits(4, true));
    let mut batcher = batcher.with_transforms(dropping_inserts());
    let mut batches: Vec<_> = stream(&[3, 3]).into_iter().filter_map(|e| batcher.push(e).unwrap()).collect();
    batches.extend(batcher.finish());
    let spans: Vec<(Position, Position, usize)> =
        batches.iter().map(|b| (b.first().clone(), b.last().clone(), b.event_count())).collect();
    let at = |tx, seq| Position::Generator { tx, seq };
    assert_eq!(spans, [(at(1, 0), at(1, 2), 0), (at(2, 0), at(2, 2), 0)]);
    assert!(read_all(&batches[0], None).await.is_empty());
    assert!(batches[0].chunks(Some(&at(1, 2))).unwrap().is_none(), "a sink at the end needs nothing more");
}

#[tokio::test]
async fn a_spilled_transaction_whose_events_were_all_dropped_keeps_its_span() {
    let dir = tempfile::tempdir().unwrap();
    let limits = BatchConfig { max_events: 100, max_bytes: 1, respect_source_tx: true, ..BatchConfig::default() };
    let mut batcher = Batcher::new(limits, dir.path().join("spill")).with_transforms(dropping_inserts());
    let batches: Vec<_> = stream(&[5]).into_iter().filter_map(|e| batcher.push(e).unwrap()).collect();
    assert_eq!(batches.len(), 1);
    let batch = &batches[0];
    assert!(batch.is_spilled());
    assert_eq!(
        (batch.first(), batch.last()),
        (&Position::Generator { tx: 1, seq: 0 }, &Position::Generator { tx: 1, seq: 4 })
    );
    assert!(read_all(batch, None).await.is_empty());
}

#[test]
fn a_long_batch_split_across_threads_keeps_its_events_in_order() {
    // Every other transaction is updates, which the filter keeps.
    let mut events = stream(&[1000; 8]);
    for event in events.iter_mut().filter(|e| e.tx_id.parse::<u64>().unwrap() % 2 == 0) {
        event.op = Op::Update;
    }
    let expected: Vec<Position> = events.iter().filter(|e| e.op == Op::Update).map(|e| e.position.clone()).collect();
    let transforms = dropping_inserts();
    let batch = Batch::in_memory(1, events, (0, 0), &transforms).unwrap().unwrap();
    let kept: Vec<Position> = batch.events().unwrap().iter().map(|e| e.position.clone()).collect();
    assert_eq!(kept, expected);
    let counts: Vec<u64> =
        transforms.counts().map(|(_, c)| c.dropped.load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert_eq!(counts, [4000]);
}

#[test]
fn a_batch_carries_the_heap_its_events_take_and_a_spilled_copy_none() {
    // Transactions of 3, 3 and 2 events, batches of 4: the first cut
    // leaves part of a transaction behind, the last takes all there is.
    let (mut batcher, dir) = batcher(limits(4, true));
    let mut batches: Vec<_> = stream(&[3, 3, 2]).into_iter().filter_map(|e| batcher.push(e).unwrap()).collect();
    batches.extend(batcher.finish());
    assert_eq!(batches.iter().map(|b| b.events().unwrap().len()).collect::<Vec<_>>(), vec![3, 3, 2]);
    for batch in &batches {
        let heap: usize = batch.events().unwrap().iter().map(|e| e.sizes().1).sum();
        assert_eq!(batch.heap_bytes, heap, "batch {}", batch.seq);
    }
    let copy = batches[0].spilled_copy(dir.path()).unwrap().unwrap();
    assert_eq!(copy.heap_bytes, 0, "a spilled copy holds nothing on the heap");
}
