//! The comparison: per sink, expected, delivered, lost, duplicated, and the
//! longest run of replayed events.

use std::collections::{BTreeMap, BTreeSet};

use crate::db::Kind;
use crate::pipeline::Held;
use crate::workload::Change;

/// Prints the table; true when no sink lost anything and no exactly-once
/// sink holds a duplicate. `expected` holds what each source committed.
pub fn print(expected: &[(Kind, Vec<Change>)], held: &[Held]) -> bool {
    let mut ok = true;
    let mut examples = Vec::new();
    let width = held.iter().map(|h| h.guarantee.len()).max().unwrap_or(9);
    println!(
        "{:<6} {:<10} {:<width$} {:>9} {:>9} {:>6} {:>10} {:>8}",
        "SOURCE", "SINK", "GUARANTEE", "EXPECTED", "DELIVERED", "LOST", "DUPLICATED", "MAX GAP"
    );
    for sink in held {
        let wanted: BTreeSet<&Change> =
            expected.iter().filter(|(k, _)| *k == sink.source).flat_map(|(_, c)| c.iter()).collect();
        let mut counts: BTreeMap<&Change, u64> = BTreeMap::new();
        let (mut run, mut max_run) = (0u64, 0u64);
        for change in &sink.changes {
            let count = counts.entry(change).or_insert(0);
            *count += 1;
            run = if *count > 1 { run + 1 } else { 0 };
            max_run = max_run.max(run);
        }
        let lost = wanted.iter().filter(|c| !counts.contains_key(*c)).count();
        let duplicated: u64 = counts.values().map(|n| n - 1).sum();
        let foreign = counts.keys().filter(|c| !wanted.contains(*c)).count();
        let exactly_once = sink.guarantee.starts_with("exactly-once");
        let failed = lost > 0 || foreign > 0 || (exactly_once && duplicated > 0);
        ok &= !failed;
        if failed {
            let lost: Vec<&&Change> = wanted.iter().filter(|c| !counts.contains_key(**c)).take(5).collect();
            let foreign: Vec<&&Change> = counts.keys().filter(|c| !wanted.contains(*c)).take(5).collect();
            examples.push(format!(
                "torture: {}/{} e.g. lost {lost:?}, never committed {foreign:?}",
                sink.source.tag(),
                sink.sink
            ));
        }
        println!(
            "{:<6} {:<10} {:<width$} {:>9} {:>9} {:>6} {:>10} {:>8}{}",
            sink.source.tag(),
            sink.sink,
            sink.guarantee,
            wanted.len(),
            sink.changes.len(),
            lost,
            duplicated,
            max_run,
            if foreign > 0 { format!("  ({foreign} never committed!)") } else { String::new() },
        );
    }
    for example in examples {
        println!("{example}");
    }
    ok
}

/// The apply-mode sinks' tables against each source's final rows; true
/// when every table holds exactly the rows the source holds, each at its
/// last change.
pub fn final_states(
    expected: &[(Kind, Vec<crate::pipeline::Rows>)],
    held: &[(Kind, &str, Vec<crate::pipeline::Rows>)],
) -> bool {
    let mut ok = true;
    for (kind, sink, tables) in held {
        let Some((_, want)) = expected.iter().find(|(k, _)| k == kind) else { continue };
        let rows: usize = want.iter().map(|t| t.len()).sum();
        let wrong: usize = want
            .iter()
            .zip(tables)
            .map(|(w, h)| {
                w.iter().filter(|(id, change)| h.get(id) != Some(change)).count()
                    + h.keys().filter(|id| !w.contains_key(id)).count()
            })
            .sum();
        ok &= wrong == 0 && tables.len() == want.len();
        println!("torture: {} {sink}: final state {rows} rows, {wrong} differ from the source", kind.tag());
    }
    ok
}
