//! Property and scenario tests of the coordinator: generator source,
//! memory sinks behind fault-injecting wrappers, crashes that drop every
//! task mid-flight, and restarts from the store.

mod harness;

use std::collections::BTreeSet;

use harness::{Outcome, Scenario, SinkScenario, World};
use proptest::prelude::*;
use sluice_config::{BatchConfig, CommitPolicy, PolicyMode};
use sluice_core::Position;
use sluice_sinks::testing::{Fault, MemoryOptions};
use sluice_transform::{FilterAction, FilterConfig, TransformConfig};

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        6 => Just(Fault::None),
        1 => Just(Fault::FailBefore),
        1 => Just(Fault::FailAfter),
        1 => Just(Fault::FailMidway),
        1 => Just(Fault::Hang),
        1 => Just(Fault::CrashBefore),
        1 => Just(Fault::CrashAfter),
    ]
}

fn sink() -> impl Strategy<Value = SinkScenario> {
    (any::<bool>(), any::<bool>(), 1u32..4, any::<bool>(), prop::collection::vec(fault(), 0..12)).prop_map(
        |(required, co_located, durable_every, merges_writes, faults)| SinkScenario {
            required,
            at_most_once: false,
            options: MemoryOptions { co_located, retain: true, durable_every, merges_writes },
            faults,
        },
    )
}

/// A filter dropping the events of some ops: none, deletes, updates and
/// deletes, or all of them (every batch then reaches the sinks empty).
fn filter() -> impl Strategy<Value = Vec<TransformConfig>> {
    let drop = |ops: &[&str]| {
        vec![TransformConfig::Filter(FilterConfig {
            action: FilterAction::Drop,
            ops: ops.iter().map(|op| op.to_string()).collect(),
            tables: Vec::new(),
            conditions: Vec::new(),
        })]
    };
    prop_oneof![
        3 => Just(Vec::new()),
        1 => Just(drop(&["d"])),
        1 => Just(drop(&["u", "d"])),
        1 => Just(drop(&["c", "u", "d"])),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let shape = (1u64..40, 1u32..6, 1usize..16, 1usize..4, any::<bool>());
    // Small byte limits make multi-event transactions spill to disk.
    let max_bytes = prop_oneof![Just(sluice_config::DEFAULT_MAX_BYTES), 200usize..2000];
    (shape, max_bytes, prop::collection::vec(sink(), 1..4), 0u8..3, filter()).prop_map(
        |(
            (tx_count, rows_per_tx, max_events, max_inflight, respect_source_tx),
            max_bytes,
            mut sinks,
            mode,
            transforms,
        )| {
            // Mode `required` needs a required sink, as config validation demands.
            if !sinks.iter().any(|s| s.required) {
                sinks[0].required = true;
            }
            let policy = match mode {
                0 => CommitPolicy { mode: PolicyMode::Required, quorum: None },
                1 => CommitPolicy { mode: PolicyMode::All, quorum: None },
                _ => CommitPolicy { mode: PolicyMode::Quorum, quorum: Some(sinks.len().div_ceil(2)) },
            };
            Scenario {
                tx_count,
                rows_per_tx,
                batch: BatchConfig { max_events, max_bytes, max_inflight, respect_source_tx, ..BatchConfig::default() },
                policy,
                sinks,
                transforms,
            }
        },
    )
}

fn positions(events: &[sluice_core::Event]) -> Vec<Position> {
    events.iter().map(|e| e.position.clone()).collect()
}

proptest! {
    // PROPTEST_CASES raises the count for a deeper local run.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    /// Whatever fails and however often the process dies: every sink ends
    /// up with every event the filter keeps; sinks that co-locate their
    /// checkpoint get each exactly once; with `respect_source_tx` no write
    /// ends mid-transaction; and every sink's checkpoint reaches the last
    /// event, dropped or not.
    /// The store and the source wrappers assert the frontier and MIN rules
    /// on every commit and every poll.
    #[test]
    fn no_loss_no_duplicates_no_split_transactions(scenario in scenario()) {
        let world = World::new(scenario.clone());
        world.run_to_completion();
        let expected = world.expected();
        let generated = world.generated();
        let tx_ends: BTreeSet<Position> = generated.iter().filter(|e| e.tx_end).map(|e| e.position.clone()).collect();
        let end = generated.last().map(|e| e.position.clone());
        let stored = sluice_core::CheckpointStore::list(&*world.store).unwrap();
        prop_assert_eq!(stored.len(), scenario.sinks.len());
        for (key, position) in stored {
            prop_assert_eq!(Some(position), end.clone(), "checkpoint {} stops short of the last event", key);
        }
        let expected_positions: BTreeSet<Position> = positions(&expected).into_iter().collect();
        for (index, spec) in scenario.sinks.iter().enumerate() {
            let held = world.logs[index].events();
            let held_positions: BTreeSet<Position> = positions(&held).into_iter().collect();
            prop_assert_eq!(&held_positions, &expected_positions, "sink{} lost events", index);
            for event in &held {
                let original = &expected[expected.iter().position(|e| e.position == event.position).unwrap()];
                prop_assert_eq!(event, original, "sink{} holds an altered event", index);
            }
            if spec.options.co_located {
                prop_assert_eq!(positions(&held), positions(&expected), "sink{} got duplicates or disorder", index);
            }
            if scenario.batch.respect_source_tx {
                let calls = world.calls[index].lock().unwrap();
                prop_assert!(calls.iter().all(|c| tx_ends.contains(&c.last)), "sink{} got a write that ends mid-transaction", index);
            }
        }
    }
}

fn plain_sink(required: bool, co_located: bool, faults: Vec<Fault>) -> SinkScenario {
    SinkScenario {
        required,
        at_most_once: false,
        options: MemoryOptions { co_located, ..MemoryOptions::default() },
        faults,
    }
}

fn scenario_with(sinks: Vec<SinkScenario>, mode: PolicyMode) -> Scenario {
    Scenario {
        tx_count: 20,
        rows_per_tx: 3,
        batch: BatchConfig { max_events: 6, ..BatchConfig::default() },
        policy: CommitPolicy { mode, quorum: None },
        sinks,
        transforms: Vec::new(),
    }
}

#[test]
fn a_failing_optional_sink_does_not_hold_back_a_required_one() {
    let world = World::new(scenario_with(
        vec![plain_sink(true, true, vec![]), plain_sink(false, true, vec![Fault::Reject])],
        PolicyMode::Required,
    ));
    let Outcome::Finished(report) = world.run_once(true) else { panic!("the run must finish") };
    let last = Position::Generator { tx: 20, seq: 2 };
    assert_eq!(report.checkpoints[0].1, Some(last.clone()), "the required sink advanced to the end");
    assert_eq!(report.checkpoints[1].1, None, "the detached sink's checkpoint stayed put");
    assert_eq!(world.logs[1].events().len(), 0);
    // On the next start it catches up from its own checkpoint.
    let Outcome::Finished(report) = world.run_once(false) else { panic!("the run must finish") };
    assert_eq!(report.checkpoints[1].1, Some(last));
    assert_eq!(world.logs[1].events().len(), 60);
    assert_eq!(world.logs[0].events().len(), 60, "the required sink got no replay");
}

#[test]
fn a_permanently_failing_required_sink_stops_the_pipeline_with_its_name() {
    let world = World::new(scenario_with(
        vec![plain_sink(true, true, vec![]), plain_sink(true, true, vec![Fault::None, Fault::Reject])],
        PolicyMode::Required,
    ));
    let Outcome::Failed(err) = world.run_once(true) else { panic!("the run must fail") };
    let message = err.to_string();
    assert!(message.contains("sink \"sink1\"") && message.contains("hint: remove the fault"), "{message}");
    // Nothing passes the failed sink's durable position.
    let held = world.logs[1].last_position();
    assert!(world.store.inner.get(&harness::key(0)) <= held);
}

#[test]
fn mode_all_retries_an_optional_sink_instead_of_detaching_it() {
    let faults = vec![Fault::FailBefore; 30];
    let world = World::new(scenario_with(
        vec![plain_sink(true, true, vec![]), plain_sink(false, false, faults)],
        PolicyMode::All,
    ));
    let Outcome::Finished(report) = world.run_once(true) else { panic!("the run must finish") };
    let last = Some(Position::Generator { tx: 20, seq: 2 });
    assert_eq!(report.checkpoints[0].1, last);
    assert_eq!(report.checkpoints[1].1, last);
}

#[test]
fn batches_queued_behind_a_failed_write_go_in_one_write_to_a_sink_that_merges() {
    // The first write fails; the batches the source produced meanwhile
    // wait in the buffer, and the retry takes them with it.
    let mut sink = plain_sink(true, true, vec![Fault::FailBefore]);
    sink.options.merges_writes = true;
    let world = World::new(scenario_with(vec![sink], PolicyMode::Required));
    assert!(matches!(world.run_once(true), Outcome::Finished(_)));
    assert_eq!(positions(&world.logs[0].events()), positions(&world.expected()));
    let calls = world.calls[0].lock().unwrap().len();
    let status = world.last_status.lock().unwrap().clone().unwrap();
    let batches = status.sinks[0].batches.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(batches, 10, "60 events in batches of 6");
    assert!(calls < 10, "{calls} writes for 10 batches: none was merged");
}

#[test]
fn a_sink_that_does_not_co_locate_may_see_a_retried_batch_again() {
    // FailAfter writes and then errors: an at-least-once sink gets the
    // batch again, and that is the documented guarantee.
    let world = World::new(scenario_with(vec![plain_sink(true, false, vec![Fault::FailAfter])], PolicyMode::Required));
    assert!(matches!(world.run_once(true), Outcome::Finished(_)));
    let held = world.logs[0].events();
    assert!(held.len() > 60, "expected a replayed batch, got {} events", held.len());
    let unique: BTreeSet<Position> = positions(&held).into_iter().collect();
    assert_eq!(unique.len(), 60);
}

#[test]
fn a_crash_between_write_and_checkpoint_leaves_no_duplicate_on_a_co_located_sink() {
    let world = World::new(scenario_with(
        vec![plain_sink(true, true, vec![Fault::None, Fault::CrashAfter])],
        PolicyMode::Required,
    ));
    assert!(matches!(world.run_once(true), Outcome::Crashed));
    assert!(
        world.store.inner.get(&harness::key(0)) < world.logs[0].last_position(),
        "the crash must land between the write and its checkpoint"
    );
    world.run_to_completion();
    assert_eq!(positions(&world.logs[0].events()), positions(&world.expected()));
}

#[test]
fn a_poison_event_goes_to_the_dead_letter_queue_and_the_rest_flows() {
    use sluice_core::DeadLetterQueue;
    let world = World::new(scenario_with(
        vec![plain_sink(true, true, vec![Fault::None, Fault::RejectFirst]), plain_sink(true, true, vec![])],
        PolicyMode::Required,
    ));
    let Outcome::Finished(_) = world.run_once(true) else { panic!("the run must finish") };
    let letters = world.dead_letters.letters().unwrap();
    assert_eq!(letters.len(), 1, "one poison event");
    let poisoned: Position = letters[0].position.parse().unwrap();
    assert!(letters[0].event.contains(&letters[0].position) && letters[0].error.contains("poison"));
    let held = positions(&world.logs[0].events());
    let expected: Vec<Position> = positions(&world.expected()).into_iter().filter(|p| *p != poisoned).collect();
    assert_eq!(held, expected, "everything but the poison event, once, in order");
    assert_eq!(world.logs[1].events().len(), 60, "the other sink is not affected");
}

#[test]
fn an_at_most_once_sink_that_fails_half_its_writes_loses_exactly_the_counted_events() {
    // Every other write fails: before writing, after writing half, or
    // after writing it all. The sink says on open what it holds, so the
    // writer counts as dropped exactly what it did not take.
    let faults: Vec<Fault> = (0..40)
        .map(|i| match i % 6 {
            1 => Fault::FailBefore,
            3 => Fault::FailMidway,
            5 => Fault::FailAfter,
            _ => Fault::None,
        })
        .collect();
    let options = MemoryOptions { co_located: true, ..MemoryOptions::default() };
    let at_most_once = SinkScenario { required: false, at_most_once: true, options, faults };
    let world = World::new(scenario_with(vec![plain_sink(true, false, vec![]), at_most_once], PolicyMode::Required));
    let Outcome::Finished(report) = world.run_once(true) else { panic!("the run must finish") };
    let last = Some(Position::Generator { tx: 20, seq: 2 });
    assert_eq!(report.checkpoints[0].1, last, "the required sink is not held back");
    assert_eq!(report.checkpoints[1].1, last, "the at-most-once sink's checkpoint passes what it dropped");
    let held = positions(&world.logs[1].events());
    let unique: BTreeSet<Position> = held.iter().cloned().collect();
    assert_eq!(unique.len(), held.len(), "an event written twice");
    let status = world.last_status.lock().unwrap().clone().unwrap();
    let dropped = status.sinks[1].dropped.load(std::sync::atomic::Ordering::Relaxed);
    assert!(dropped > 0, "no batch was dropped");
    assert_eq!(held.len() as u64 + dropped, 60, "held and dropped events make up the stream");
}
