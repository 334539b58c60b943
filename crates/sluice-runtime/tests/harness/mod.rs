//! A harness that runs a pipeline of the generator and memory sinks,
//! crashes it on demand, restarts it from the store, and checks what the
//! sinks hold against what the generator produced.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sluice_config::{BatchConfig, CommitPolicy, GeneratorConfig, PolicyMode};
use sluice_core::{
    AckWatermark, CheckpointKey, CheckpointStore, Event, EventChunks, Guarantee, Position, Sink, SinkError,
    SliceChunks, Source, SourceError, SourceStatus, StoreError, collect_chunks,
};
use sluice_generator::GeneratorSource;
use sluice_runtime::{Pipeline, PipelineError, PipelineSettings, RunReport, Shutdown, SinkSpec};
use sluice_sinks::testing::{CrashSwitch, Fault, FaultPlan, FaultySink, MemoryLog, MemoryOptions, MemorySink};
use sluice_store::MemoryStore;

pub const SOURCE_ID: &str = "gen";

#[derive(Debug, Clone)]
pub struct SinkScenario {
    pub required: bool,
    /// `delivery: at_most_once`: failed batches are dropped and counted.
    pub at_most_once: bool,
    pub options: MemoryOptions,
    pub faults: Vec<Fault>,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub tx_count: u64,
    pub rows_per_tx: u32,
    pub batch: BatchConfig,
    pub policy: CommitPolicy,
    pub sinks: Vec<SinkScenario>,
    /// The pipeline's transforms.
    pub transforms: Vec<sluice_transform::TransformConfig>,
}

/// One write call as the sink saw it (before faults split it).
#[derive(Debug, Clone)]
pub struct Call {
    /// Where the write ends: its last event's position, or past it when a
    /// transform dropped the later ones.
    pub last: Position,
}

pub struct World {
    pub scenario: Scenario,
    pub store: Arc<ObservedStore>,
    pub logs: Vec<Arc<MemoryLog>>,
    pub calls: Vec<Arc<Mutex<Vec<Call>>>>,
    plans: Vec<FaultPlan>,
    spill_dir: tempfile::TempDir,
    pub dead_letters: Arc<MemoryStore>,
    /// The status of the last run, for its counters.
    pub last_status: Mutex<Option<Arc<sluice_runtime::PipelineStatus>>>,
}

pub enum Outcome {
    Finished(RunReport),
    Crashed,
    Failed(PipelineError),
}

impl World {
    pub fn new(scenario: Scenario) -> Self {
        let logs: Vec<_> = scenario.sinks.iter().map(|_| MemoryLog::new()).collect();
        let keys = (0..scenario.sinks.len()).map(key).collect();
        let store = Arc::new(ObservedStore {
            inner: MemoryStore::new(),
            logs: logs.clone(),
            required: scenario.sinks.iter().map(|s| s.required).collect(),
            at_most_once: scenario.sinks.iter().map(|s| s.at_most_once).collect(),
            policy: scenario.policy.clone(),
            keys,
        });
        Self {
            plans: scenario.sinks.iter().map(|s| FaultPlan::new(s.faults.clone())).collect(),
            calls: scenario.sinks.iter().map(|_| Arc::default()).collect(),
            logs,
            store,
            scenario,
            spill_dir: tempfile::tempdir().unwrap(),
            dead_letters: Arc::new(MemoryStore::new()),
            last_status: Mutex::new(None),
        }
    }

    pub fn generator_config(&self) -> GeneratorConfig {
        GeneratorConfig {
            id: SOURCE_ID.into(),
            tx_count: Some(self.scenario.tx_count),
            rows_per_tx: self.scenario.rows_per_tx,
            tables: vec!["a".into(), "b".into()],
            database: "db".into(),
            events_per_sec: None,
            seed: 3,
        }
    }

    /// Every event the generator produces, in order, before transforms.
    pub fn generated(&self) -> Vec<Event> {
        let generator = GeneratorSource::new(self.generator_config());
        let mut all = Vec::new();
        for tx in 1..=self.scenario.tx_count {
            for seq in 0..self.scenario.rows_per_tx {
                all.push(generator.event_at(tx, seq));
            }
        }
        all
    }

    /// What the sinks must end up with: the generated events the
    /// scenario's transforms keep, as they leave them.
    pub fn expected(&self) -> Vec<Event> {
        let transforms =
            sluice_transform::Transforms::build(&self.scenario.transforms).expect("the scenario's transforms build");
        let mut kept = self.generated();
        kept.retain_mut(|event| transforms.apply(event) == Ok(sluice_transform::Verdict::Keep));
        kept
    }

    /// One process lifetime: runs until the pipeline ends or a fault
    /// crashes it. Time is paused, so deadlines and backoff cost nothing.
    pub fn run_once(&self, faults_enabled: bool) -> Outcome {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        let crash = CrashSwitch::default();
        let sinks: Vec<SinkSpec> = self
            .scenario
            .sinks
            .iter()
            .enumerate()
            .map(|(index, spec)| {
                let memory = MemorySink::new(format!("sink{index}"), self.logs[index].clone(), spec.options);
                let plan = if faults_enabled { self.plans[index].clone() } else { FaultPlan::default() };
                let faulty = FaultySink::new(memory, plan, crash.clone());
                let recording = Recording { inner: faulty, calls: self.calls[index].clone() };
                SinkSpec {
                    sink: Box::new(recording),
                    required: spec.required,
                    buffer: sluice_config::BufferConfig::default().limits(spec.required),
                    at_most_once: spec.at_most_once,
                    transforms: Default::default(),
                }
            })
            .collect();
        let source =
            AckChecked { inner: GeneratorSource::new(self.generator_config()), ack: None, store: self.store.clone() };
        let handle = sluice_runtime::handle_of("test", &source, "generator", &sinks);
        *self.last_status.lock().unwrap() = Some(handle.status.clone());
        let pipeline = Pipeline {
            settings: PipelineSettings {
                slo: sluice_config::SloConfig::default(),
                detach_marks: sluice_core::StateDir::files(self.spill_dir.path().join("detached")),
                name: "test".into(),
                batch: self.scenario.batch.clone(),
                commit_policy: self.scenario.policy.clone(),
                sink_batch_deadline: Duration::from_secs(1),
                reattach_probe: Duration::from_secs(1),
                shutdown_grace: Duration::from_secs(30),
                spill_dir: self.spill_dir.path().join("spill"),
                dead_letter: sluice_config::DeadLetterConfig::default(),
                transforms: Arc::new(
                    sluice_transform::Transforms::build(&self.scenario.transforms)
                        .expect("the scenario's transforms build"),
                ),
            },
            source: Box::new(source),
            sinks,
            store: self.store.clone(),
            dead_letters: self.dead_letters.clone(),
            handle,
        };
        let outcome = runtime.block_on(async {
            tokio::select! {
                result = pipeline.run(Shutdown::new()) => match result {
                    Ok(report) => Outcome::Finished(report),
                    Err(err) => Outcome::Failed(err),
                },
                _ = crash.fired() => Outcome::Crashed,
            }
        });
        // Dropping the runtime cancels every task wherever it stands: the
        // in-memory equivalent of kill -9.
        drop(runtime);
        outcome
    }

    /// Runs with faults until a run finishes, then once more without
    /// faults so that detached optional sinks catch up.
    pub fn run_to_completion(&self) -> usize {
        let mut crashes = 0;
        loop {
            match self.run_once(true) {
                Outcome::Finished(_) => break,
                Outcome::Crashed => crashes += 1,
                Outcome::Failed(err) => panic!("pipeline failed: {err}"),
            }
            assert!(crashes < 200, "the pipeline never finished");
        }
        match self.run_once(false) {
            Outcome::Finished(_) => crashes,
            Outcome::Crashed => unreachable!("no faults in the last run"),
            Outcome::Failed(err) => panic!("pipeline failed: {err}"),
        }
    }
}

pub fn key(index: usize) -> CheckpointKey {
    CheckpointKey::new(SOURCE_ID, format!("sink{index}"))
}

/// Records each write call, then passes it on.
struct Recording<S> {
    inner: S,
    calls: Arc<Mutex<Vec<Call>>>,
}

#[async_trait]
impl<S: Sink> Sink for Recording<S> {
    fn id(&self) -> &str {
        self.inner.id()
    }
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        self.inner.preflight().await
    }
    fn guarantee(&self) -> Guarantee {
        self.inner.guarantee()
    }
    fn merges_writes(&self) -> bool {
        self.inner.merges_writes()
    }
    fn unsynced_bound(&self) -> Option<usize> {
        self.inner.unsynced_bound()
    }
    fn reads_back_what_it_holds(&self) -> bool {
        self.inner.reads_back_what_it_holds()
    }
    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        self.inner.open().await
    }
    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let all = collect_chunks(events).await?;
        let last = events.last_position().clone();
        assert!(all.last().is_none_or(|e| e.position <= last), "a write ends before its last event");
        self.calls.lock().unwrap().push(Call { last: last.clone() });
        self.inner.write(&mut SliceChunks::ending_at(&all, &last)).await
    }
    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        self.inner.flush().await
    }
    async fn close(&mut self) -> Result<(), SinkError> {
        self.inner.close().await
    }
}

/// Asserts, each time the source reads, that the coordinator never
/// acknowledged past the lowest stored checkpoint of all sinks.
struct AckChecked {
    inner: GeneratorSource,
    ack: Option<AckWatermark>,
    store: Arc<ObservedStore>,
}

#[async_trait]
impl Source for AckChecked {
    fn id(&self) -> &str {
        self.inner.id()
    }
    async fn start(&mut self, from: Option<Position>, acked: AckWatermark) -> Result<(), SourceError> {
        self.ack = Some(acked.clone());
        self.inner.start(from, acked).await
    }
    async fn poll(&mut self, out: &mut Vec<Event>) -> Result<SourceStatus, SourceError> {
        if let Some(acked) = self.ack.as_ref().and_then(AckWatermark::get) {
            for key in &self.store.keys {
                let stored = self.store.inner.get(key);
                assert!(
                    stored.as_ref().is_some_and(|s| *s >= acked),
                    "source acknowledged {acked} but {key} is stored at {stored:?}"
                );
            }
        }
        self.inner.poll(out).await
    }
}

/// A memory store that checks every commit against the commit policy:
/// no checkpoint may pass what the sinks the policy requires hold durably
/// (save an at-most-once sink, whose checkpoint passes what it dropped).
pub struct ObservedStore {
    pub inner: MemoryStore,
    logs: Vec<Arc<MemoryLog>>,
    required: Vec<bool>,
    at_most_once: Vec<bool>,
    policy: CommitPolicy,
    keys: Vec<CheckpointKey>,
}

impl ObservedStore {
    fn check(&self, position: &Position, key: &CheckpointKey) {
        let held: Vec<Option<Position>> = self.logs.iter().map(|l| l.last_position()).collect();
        let holds = |i: usize| self.at_most_once[i] || held[i].as_ref().is_some_and(|h| h >= position);
        let index = self.keys.iter().position(|k| k == key).unwrap();
        assert!(holds(index), "{key} stored at {position} beyond what the sink holds ({:?})", held[index]);
        let must_hold: Vec<usize> = match self.policy.mode {
            PolicyMode::All => (0..held.len()).collect(),
            PolicyMode::Required | PolicyMode::Quorum => (0..held.len()).filter(|i| self.required[*i]).collect(),
        };
        for i in must_hold {
            assert!(holds(i), "{key} stored at {position} beyond the frontier: sink{i} holds {:?}", held[i]);
        }
        if self.policy.mode == PolicyMode::Quorum {
            let count = (0..held.len()).filter(|i| holds(*i)).count();
            assert!(count >= self.policy.quorum.unwrap(), "{key} stored at {position} held by only {count} sinks");
        }
    }
}

impl CheckpointStore for ObservedStore {
    fn load(&self, keys: &[CheckpointKey]) -> Result<Vec<Option<Position>>, StoreError> {
        self.inner.load(keys)
    }
    fn list(&self) -> Result<Vec<(String, Position)>, StoreError> {
        self.inner.list()
    }
    fn commit(&self, updates: &[(CheckpointKey, Position)]) -> Result<(), StoreError> {
        for (key, position) in updates {
            self.check(position, key);
        }
        self.inner.commit(updates)
    }
    fn remove(&self, keys: &[CheckpointKey]) -> Result<usize, StoreError> {
        self.inner.remove(keys)
    }
    fn generation(&self, source_id: &str) -> Result<u32, StoreError> {
        self.inner.generation(source_id)
    }
    fn reset_source(&self, source_id: &str, keys: &[CheckpointKey]) -> Result<(usize, u32), StoreError> {
        self.inner.reset_source(source_id, keys)
    }
}
