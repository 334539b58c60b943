//! `sluice checkpoints list|reset`.

use std::collections::BTreeSet;

use anyhow::anyhow;
use sluice_config::SourceConfig;
use sluice_core::{CheckpointKey, StateDir};

use crate::cli::{CheckpointsAction, CheckpointsArgs, ResetArgs, RunArgs};
use crate::validate::table;
use crate::{Failure, assemble};

pub fn checkpoints(args: CheckpointsArgs) -> Result<(), Failure> {
    match args.action {
        CheckpointsAction::List { run, api } => list(run, &api.api_addr),
        CheckpointsAction::Reset(args) => reset(args),
    }
}

fn list(args: RunArgs, api_addr: &str) -> Result<(), Failure> {
    let config = assemble::load(&args.config.config)?;
    let Some(store) = assemble::open_store_unless_running(&config, &args.data_dir)? else {
        crate::remote::announce(api_addr);
        return crate::remote::checkpoints_list(api_addr, &config);
    };
    let stored = store.list().map_err(Failure::pipeline)?;
    let mut rows = vec![["PIPELINE".to_string(), "KEY".to_string(), "CHECKPOINT".to_string()]];
    let mut known = BTreeSet::new();
    for pipeline in &config.pipelines {
        for sink in &pipeline.sinks {
            let key = CheckpointKey::new(pipeline.source.id(), sink.id()).to_string();
            let position = stored.iter().find(|(k, _)| *k == key).map(|(_, p)| p.to_string());
            rows.push([pipeline.name.clone(), key.clone(), position.unwrap_or_else(|| "none".into())]);
            known.insert(key);
        }
    }
    for (key, position) in stored.iter().filter(|(k, _)| !known.contains(k)) {
        rows.push(["(not in config)".into(), key.clone(), position.to_string()]);
    }
    print!("{}", table(&rows));
    Ok(())
}

/// What one pipeline's part of a reset covers.
struct Reset {
    source_id: String,
    keys: Vec<CheckpointKey>,
    /// Every sink of the pipeline: the source starts a new log generation.
    whole_source: bool,
    /// The MySQL source's state, whose schema history only holds for the
    /// old log.
    schema_history: Option<String>,
}

fn reset(args: ResetArgs) -> Result<(), Failure> {
    let config = assemble::load(&args.run.config.config)?;
    let mut resets = Vec::new();
    let mut marks = Vec::new();
    for pipeline in &config.pipelines {
        if args.pipeline.as_ref().is_some_and(|p| *p != pipeline.name) {
            continue;
        }
        let mut keys = Vec::new();
        for sink in &pipeline.sinks {
            if args.sink.as_ref().is_none_or(|s| s == sink.id()) {
                keys.push(CheckpointKey::new(pipeline.source.id(), sink.id()));
                marks.push((pipeline.name.clone(), sluice_runtime::detach_mark(sink.id())));
            }
        }
        if keys.is_empty() {
            continue;
        }
        let whole_source = args.sink.is_none();
        let schema_history = match &pipeline.source {
            SourceConfig::Mysql(c) if whole_source => Some(c.id.clone()),
            _ => None,
        };
        resets.push(Reset { source_id: pipeline.source.id().to_string(), keys, whole_source, schema_history });
    }
    if resets.is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "no sink matches --pipeline {:?} --sink {:?}; hint: run `sluice checkpoints list` to see the names",
            args.pipeline.unwrap_or_default(),
            args.sink.unwrap_or_default()
        )));
    }
    let count: usize = resets.iter().map(|r| r.keys.len()).sum();
    if !args.yes {
        let generation = if resets.iter().any(|r| r.whole_source) {
            ", starts a new log generation for the source (sinks that store their own position receive the source's events again, with new event ids)"
        } else {
            ""
        };
        return Err(Failure::bad_input(anyhow!(
            "this deletes {count} checkpoint(s){generation}, and sinks that do not store their own position will receive their events again; hint: add --yes to confirm"
        )));
    }
    let store = assemble::open_store(&config, &args.run.data_dir)?;
    let state = store.state();
    for reset in &resets {
        if reset.whole_source {
            let (removed, generation) = store.reset_source(&reset.source_id, &reset.keys).map_err(Failure::pipeline)?;
            println!(
                "removed {removed} checkpoint(s) of source {:?}; it starts log generation {generation}: \
                 positions the sinks hold from before no longer count",
                reset.source_id
            );
        } else {
            let removed = store.remove(&reset.keys).map_err(Failure::pipeline)?;
            println!("removed {removed} checkpoint(s)");
        }
        if let Some(source) = &reset.schema_history {
            archive(&state.child("mysql").child(source))?;
        }
    }
    // A detached sink whose checkpoint is reset starts over, so it no
    // longer needs the resync its mark asks for.
    for (pipeline, mark) in marks {
        let marks = state.child("detached").child(&pipeline);
        match marks.remove(&mark) {
            Ok(true) => println!("cleared the detachment mark {}", marks.locate(&mark)),
            Ok(false) => {}
            Err(e) => return Err(Failure::pipeline(anyhow!("cannot remove {}: {e}", marks.locate(&mark)))),
        }
    }
    Ok(())
}

/// Moves the schema history aside (kept, not deleted, for whoever wants to
/// see what it held): its positions are of the old log, so the source
/// reads each table's schema again the first time it sees the table.
fn archive(state: &StateDir) -> Result<(), Failure> {
    use sluice_core::history::HISTORY_NAME;
    let aside = format!("{HISTORY_NAME}.before-reset-{}", sluice_core::time::now_us());
    let failed = |e: sluice_core::StoreError| {
        Failure::pipeline(anyhow!(
            "cannot move the schema history {} aside: {e}; hint: move it away by hand before the next `sluice run`",
            state.locate(HISTORY_NAME)
        ))
    };
    let Some(history) = state.read(HISTORY_NAME).map_err(failed)? else { return Ok(()) };
    state.write(&aside, &history).map_err(failed)?;
    state.remove(HISTORY_NAME).map_err(failed)?;
    println!("moved the schema history {} to {}", state.locate(HISTORY_NAME), state.locate(&aside));
    Ok(())
}
