//! Coordinator throughput: generator → memory sink and generator → file
//! sink (in the data dir's file system and in /dev/shm), 2M events each,
//! plus the generator alone as the ceiling.
//!
//! `cargo bench -p sluice --bench pipeline`. Each case runs in a child
//! process of its own so that its peak RSS is its own.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_config::{BatchConfig, CommitPolicy, GeneratorConfig};
use sluice_core::{AckWatermark, Sink, Source, SourceStatus};
use sluice_generator::GeneratorSource;
use sluice_runtime::{Pipeline, PipelineSettings, Shutdown, SinkSpec};
use sluice_sinks::FileSink;
use sluice_sinks::testing::{MemoryLog, MemoryOptions, MemorySink};
use sluice_store::EmbeddedStore;

/// The allocator the `sluice` binary ships with, so the figures match it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CASE_VAR: &str = "SLUICE_BENCH_CASE";
const ROWS_PER_TX: u32 = 10;
const TX_COUNT: u64 = 200_000;
const CASES: [&str; 5] =
    ["generator-only", "generator-to-memory", "generator-to-file", "generator-to-shm-file", "one-2m-event-tx-to-file"];

fn main() {
    if let Ok(case) = std::env::var(CASE_VAR) {
        run_case(&case);
        return;
    }
    let exe = std::env::current_exe().expect("bench binary path");
    println!("{:<22} {:>10} {:>9} {:>13} {:>13}", "case", "events", "seconds", "events/s", "peak RSS MB");
    for case in CASES {
        let output = Command::new(&exe).env(CASE_VAR, case).output().expect("bench child runs");
        assert!(output.status.success(), "{case} failed: {}", String::from_utf8_lossy(&output.stderr));
        print!("{}", String::from_utf8_lossy(&output.stdout));
    }
}

fn generator() -> GeneratorSource {
    generator_shaped(TX_COUNT, ROWS_PER_TX)
}

fn generator_shaped(tx_count: u64, rows_per_tx: u32) -> GeneratorSource {
    GeneratorSource::new(GeneratorConfig {
        id: "bench".into(),
        tx_count: Some(tx_count),
        rows_per_tx,
        tables: vec!["orders".into()],
        database: "bench".into(),
        events_per_sec: None,
        seed: 1,
    })
}

fn run_case(case: &str) {
    if case == "generator-to-shm-file" && !std::path::Path::new("/dev/shm").is_dir() {
        println!("{case:<22} skipped: this machine has no /dev/shm");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let events = TX_COUNT * u64::from(ROWS_PER_TX);
    let start = Instant::now();
    let mut verify: Box<dyn FnOnce()> = Box::new(|| {});
    match case {
        "generator-only" => runtime.block_on(async {
            let mut source = generator();
            source.start(None, AckWatermark::default()).await.unwrap();
            let mut chunk = Vec::new();
            let mut count = 0u64;
            while source.poll(&mut chunk).await.unwrap() == SourceStatus::Open {
                count += chunk.len() as u64;
                chunk.clear();
            }
            assert_eq!(count, events);
        }),
        "generator-to-memory" => {
            let log = MemoryLog::new();
            let options = MemoryOptions { co_located: true, retain: false, ..MemoryOptions::default() };
            run_pipeline(&runtime, Box::new(MemorySink::new("memory", log.clone(), options)), dir.path());
            verify = Box::new(move || assert_eq!(log.event_count(), events));
        }
        // The same file sink writing to /dev/shm: what the encode-and-write
        // path costs without the disk under the data dir.
        "generator-to-file" | "generator-to-shm-file" => {
            let shm = (case == "generator-to-shm-file").then(|| tempfile::tempdir_in("/dev/shm").unwrap());
            let path = shm.as_ref().map_or(dir.path(), |d| d.path()).join("out.jsonl");
            run_pipeline(&runtime, Box::new(FileSink::new("file", &path)), dir.path());
            verify = Box::new(move || {
                let file = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
                assert_eq!(std::io::BufRead::lines(file).count() as u64, events);
                drop(shm);
            });
        }
        "one-2m-event-tx-to-file" => {
            // One transaction far past max_bytes: it must spill, not grow the heap.
            let path = dir.path().join("out.jsonl");
            let source = generator_shaped(1, (TX_COUNT * u64::from(ROWS_PER_TX)) as u32);
            run_pipeline_with(&runtime, Box::new(source), Box::new(FileSink::new("file", &path)), dir.path());
            verify = Box::new(move || {
                let file = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
                assert_eq!(std::io::BufRead::lines(file).count() as u64, events);
            });
        }
        other => panic!("unknown case {other}"),
    }
    let seconds = start.elapsed().as_secs_f64();
    // Read before any verification that could itself grow the process.
    let peak_rss_mib = peak_rss_kib() as f64 / 1024.0;
    println!("{case:<22} {events:>10} {seconds:>9.2} {:>13.0} {:>13.1}", events as f64 / seconds, peak_rss_mib);
    verify();
}

fn run_pipeline(runtime: &tokio::runtime::Runtime, sink: Box<dyn Sink>, data_dir: &std::path::Path) {
    run_pipeline_with(runtime, Box::new(generator()), sink, data_dir);
}

fn run_pipeline_with(
    runtime: &tokio::runtime::Runtime,
    source: Box<dyn Source>,
    sink: Box<dyn Sink>,
    data_dir: &std::path::Path,
) {
    let store = Arc::new(EmbeddedStore::open(&data_dir.join("store")).unwrap());
    let sinks = vec![SinkSpec {
        sink,
        required: true,
        buffer: sluice_config::BufferConfig::default().limits(true),
        at_most_once: false,
        transforms: Default::default(),
    }];
    let handle = sluice_runtime::handle_of("bench", source.as_ref(), "bench", &sinks);
    let pipeline = Pipeline {
        settings: PipelineSettings {
            slo: Default::default(),
            detach_marks: sluice_core::StateDir::files(data_dir.join("detached")),
            name: "bench".into(),
            batch: BatchConfig::default(),
            commit_policy: CommitPolicy::default(),
            sink_batch_deadline: Duration::from_secs(60),
            reattach_probe: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
            spill_dir: data_dir.join("spill"),
            dead_letter: Default::default(),
            transforms: Default::default(),
        },
        source,
        sinks,
        store: store.clone(),
        dead_letters: store,
        handle,
    };
    runtime.block_on(pipeline.run(Shutdown::new())).unwrap();
}

/// VmHWM: the process's peak resident set.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
