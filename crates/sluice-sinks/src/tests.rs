use std::io::Write;
use std::sync::Arc;

use sluice_core::{Event, Op, Position, Row, Sink, SliceChunks, Value};

use super::*;

async fn write(sink: &mut dyn Sink, events: &[Event]) -> Result<Option<Position>, sluice_core::SinkError> {
    sink.write(&mut SliceChunks::new(events).unwrap()).await
}

fn event(tx: u64, seq: u32) -> Event {
    Event {
        op: Op::Insert,
        source_id: "src".into(),
        database: "db".into(),
        table: "t".into(),
        key: None,
        before: None,
        after: Some(Row { columns: vec![Arc::from("id")].into(), values: vec![Value::Int(tx as i64)] }),
        schema_version: 1,
        position: Position::Generator { tx, seq },
        tx_id: tx.to_string().into(),
        tx_end: true,
        commit_time_us: 0,
        schema: None,
        origin: sluice_core::schema::Origin::None,
        route: None,
        shape: Default::default(),
    }
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn file_sink_reports_what_it_holds_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/out.jsonl");
    let mut sink = FileSink::new("f", &path);
    assert_eq!(sink.open().await.unwrap(), None);
    // A batch is durable once its fsync is done, which overlaps what
    // follows: a write reports what is synced so far, never more.
    let durable = write(&mut sink, &[event(1, 0)]).await.unwrap();
    assert!(durable.as_ref().is_none_or(|d| *d == Position::Generator { tx: 1, seq: 0 }), "{durable:?}");
    let durable = write(&mut sink, &[event(2, 0)]).await.unwrap();
    assert!(durable.as_ref().is_none_or(|d| *d <= Position::Generator { tx: 2, seq: 0 }), "{durable:?}");
    assert_eq!(sink.flush().await.unwrap(), Some(Position::Generator { tx: 2, seq: 0 }));
    assert_eq!(sink.flush_due(), None);
    sink.close().await.unwrap();
    let mut reopened = FileSink::new("f", &path);
    assert_eq!(reopened.open().await.unwrap(), Some(Position::Generator { tx: 2, seq: 0 }));
    write(&mut reopened, &[event(3, 0)]).await.unwrap();
    reopened.flush().await.unwrap();
    let held: Vec<_> = lines(&path).iter().map(|l| l["position"].as_str().unwrap().to_string()).collect();
    assert_eq!(held, ["gen:1:0", "gen:2:0", "gen:3:0"]);
}

#[tokio::test]
async fn file_sink_cuts_a_torn_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let mut sink = FileSink::new("f", &path);
    sink.open().await.unwrap();
    write(&mut sink, &[event(1, 0)]).await.unwrap();
    sink.flush().await.unwrap();
    let whole_len = std::fs::metadata(&path).unwrap().len();
    let torn = serde_json::to_string(&event(2, 0)).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&torn.as_bytes()[..torn.len() / 2])
        .unwrap();
    let mut reopened = FileSink::new("f", &path);
    assert_eq!(reopened.open().await.unwrap(), Some(Position::Generator { tx: 1, seq: 0 }));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole_len);
}

#[tokio::test]
async fn file_sink_with_only_a_torn_line_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    std::fs::write(&path, "{\"position\":\"gen:1").unwrap();
    let mut sink = FileSink::new("f", &path);
    assert_eq!(sink.open().await.unwrap(), None);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

#[tokio::test]
async fn file_sink_refuses_a_file_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "shopping list\n").unwrap();
    let err = FileSink::new("f", &path).open().await.unwrap_err();
    assert!(!err.is_transient());
    let message = err.to_string();
    assert!(message.contains("not a Sluice event") && message.contains("hint:"), "{message}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "shopping list\n");
}

fn cloudevents() -> sluice_format::FormatConfig {
    serde_json::from_str(r#"{"envelope":"cloudevents"}"#).unwrap()
}

#[tokio::test]
async fn a_file_in_a_foreign_envelope_keeps_its_position_in_a_mark() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let mut sink = FileSink::with_format("f", &path, &cloudevents());
    assert_eq!(sink.open().await.unwrap(), None);
    write(&mut sink, &[event(1, 0), event(2, 0)]).await.unwrap();
    sink.flush().await.unwrap();
    let whole_len = std::fs::metadata(&path).unwrap().len();
    // A batch appended whose mark never landed, as a kill leaves it.
    let line = b"{\"specversion\":\"1.0\"}\n";
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(line).unwrap();
    let mut reopened = FileSink::with_format("f", &path, &cloudevents());
    assert_eq!(reopened.open().await.unwrap(), Some(Position::Generator { tx: 2, seq: 0 }));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole_len);
    write(&mut reopened, &[event(3, 0)]).await.unwrap();
    reopened.flush().await.unwrap();
    let ids: Vec<String> = lines(&path).iter().map(|l| l["sluiceposition"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, ["gen:1:0", "gen:2:0", "gen:3:0"]);
}

#[tokio::test]
async fn a_file_without_its_mark_is_refused_not_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    std::fs::write(&path, "{\"op\":\"c\"}\n").unwrap();
    let err = FileSink::with_format("f", &path, &cloudevents()).open().await.unwrap_err();
    assert!(!err.is_transient());
    assert!(err.to_string().contains("has no position mark"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"op\":\"c\"}\n");
}

#[test]
fn preflight_catches_paths_that_cannot_be_created() {
    let dir = tempfile::tempdir().unwrap();
    assert!(file::preflight(&dir.path().join("a/b/c.jsonl")).is_ok());
    assert!(file::preflight(dir.path()).unwrap_err().contains("is a directory"));
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, "").unwrap();
    let problem = file::preflight(&blocker.join("out.jsonl")).unwrap_err();
    assert!(problem.contains("is not a directory"), "{problem}");
    assert!(!dir.path().join("a").exists(), "preflight must not create anything");

    use std::os::unix::fs::PermissionsExt;
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    for path in [locked.join("out.jsonl"), locked.join("new/sub/out.jsonl")] {
        let problem = file::preflight(&path).unwrap_err();
        assert!(problem.contains("is read-only") && problem.contains("locked"), "{problem}");
    }
    let problem = file::writable_folder(&locked.join("lake"), &locked.join("lake")).unwrap_err();
    assert!(problem.contains("is read-only"), "{problem}");
    let file = dir.path().join("ro.jsonl");
    std::fs::write(&file, "").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
    assert!(file::preflight(&file).unwrap_err().contains("is read-only"));
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn always_built_sinks_report_the_guarantee_their_config_declares() {
    let dir = tempfile::tempdir().unwrap();
    let context = SinkContext { pipeline: "p".into(), source_id: "src".into(), data_dir: dir.path().into() };
    let configs = [
        SinkConfig::File(FileSinkConfig {
            id: "f".into(),
            path: dir.path().join("x.jsonl"),
            required: true,
            buffer: Default::default(),
            delivery: Default::default(),
            transforms: Vec::new(),
            format: Default::default(),
        }),
        SinkConfig::Stdout(StdoutSinkConfig {
            id: "s".into(),
            required: true,
            buffer: Default::default(),
            delivery: Default::default(),
            transforms: Vec::new(),
            format: Default::default(),
        }),
        SinkConfig::Stdout(StdoutSinkConfig {
            id: "s".into(),
            required: true,
            buffer: Default::default(),
            delivery: Default::default(),
            transforms: Vec::new(),
            format: serde_json::from_str(r#"{"envelope":"debezium"}"#).unwrap(),
        }),
        SinkConfig::Null(NullSinkConfig {
            id: "n".into(),
            required: false,
            buffer: Default::default(),
            delivery: Default::default(),
            transforms: Vec::new(),
        }),
    ];
    for config in configs {
        let sink = build(&config, &context).unwrap();
        assert_eq!(sink.guarantee(), config.guarantee(), "{}", config.type_name());
        assert_eq!(sink.id(), config.id());
    }
}

#[tokio::test]
async fn the_null_sink_reports_the_last_position_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let context = SinkContext { pipeline: "p".into(), source_id: "src".into(), data_dir: dir.path().into() };
    let mut sink = build(
        &SinkConfig::Null(NullSinkConfig {
            id: "n".into(),
            required: true,
            buffer: Default::default(),
            delivery: Default::default(),
            transforms: Vec::new(),
        }),
        &context,
    )
    .unwrap();
    assert_eq!(sink.open().await.unwrap(), None);
    let events: Vec<Event> = (1..=3).map(|tx| event(tx, 0)).collect();
    assert_eq!(write(sink.as_mut(), &events).await.unwrap(), Some(Position::Generator { tx: 3, seq: 0 }));
    assert_eq!(sink.flush().await.unwrap(), Some(Position::Generator { tx: 3, seq: 0 }));
    // Reopened, it has nothing to report: the coordinator replays from the checkpoint.
    assert_eq!(sink.open().await.unwrap(), None);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "the null sink writes nothing");
}

/// Sinks of the same format encode a batch once: the second takes the
/// first one's records while it holds them; another format encodes its
/// own; and nothing is kept once no sink holds it.
#[tokio::test]
async fn sinks_of_one_format_share_a_batchs_encoding() {
    use crate::encoded::{Encoding, SharedEncoder};
    use sluice_core::SharedWork;
    use std::sync::Arc;
    let events: Vec<Event> = (0..3).map(|seq| event(1, seq)).collect();
    let work = (Arc::new(SharedWork::default()), 0u64);
    let carrier = crate::FileSinkConfig::CARRIER;
    let (mut a, mut b) = (
        SharedEncoder::new(&cloudevents(), carrier, "a".into()),
        SharedEncoder::new(&cloudevents(), carrier, "b".into()),
    );
    let mut native = SharedEncoder::new(&sluice_format::FormatConfig::default(), carrier, "n".into());
    let cell = |encoding: &Encoding| match encoding {
        Encoding::Shared(cell) => cell.clone(),
        Encoding::Own(_) => panic!("a batch write is shared"),
    };
    let first = a.chunk(Some(&work), &events).await;
    let second = b.chunk(Some(&work), &events).await;
    assert!(Arc::ptr_eq(&cell(&first), &cell(&second)), "the second sink encoded again");
    let other = native.chunk(Some(&work), &events).await;
    assert!(!Arc::ptr_eq(&cell(&first), &cell(&other)), "another format took these records");
    assert_eq!(first.records(&a, 2, &events[2]).unwrap(), second.records(&b, 2, &events[2]).unwrap());
    // Another place in the batch is other work.
    let later = b.chunk(Some(&(work.0.clone(), 1)), &events[1..]).await;
    assert!(!Arc::ptr_eq(&cell(&first), &cell(&later)));
    // A batch in pieces: pieces of one length from one offset are apart.
    let piece = a.chunk(Some(&work), &events[..1]).await;
    let next_piece = b.chunk(Some(&work), &events[1..2]).await;
    assert!(!Arc::ptr_eq(&cell(&piece), &cell(&next_piece)), "a piece took another piece's records");
    assert_ne!(piece.records(&a, 0, &events[0]).unwrap(), next_piece.records(&b, 0, &events[1]).unwrap());
    drop((first, second, other, later, piece, next_piece));
    let again = a.chunk(Some(&work), &events).await;
    assert_eq!(Arc::strong_count(&cell(&again)), 2, "a record set no sink held was kept");
}

#[test]
fn a_sink_is_built_exactly_when_its_feature_is_on() {
    let kafka: SinkConfig =
        serde_json::from_str(r#"{"type":"kafka","config":{"id":"k","brokers":"127.0.0.1:9092","topic":"t"}}"#).unwrap();
    let file: SinkConfig = serde_json::from_str(r#"{"type":"file","config":{"id":"f","path":"x.jsonl"}}"#).unwrap();
    assert!(file.built().is_ok(), "the file sink has no feature: always built");
    let context = SinkContext { pipeline: "p".into(), source_id: "src".into(), data_dir: "unused".into() };
    // `built` answers what `build` does, without building.
    assert_eq!(kafka.built().is_ok(), build(&kafka, &context).is_ok());
    assert_eq!(kafka.built().is_ok(), cfg!(feature = "kafka"));
    if let Err(missing) = kafka.built() {
        assert!(missing.to_string().contains("`kafka` cargo feature"), "{missing}");
    }
}
