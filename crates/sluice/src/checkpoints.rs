//! `sluice checkpoints list|reset`.

use std::collections::BTreeSet;

use anyhow::anyhow;
use sluice_core::{CheckpointKey, CheckpointStore};

use crate::cli::{CheckpointsAction, CheckpointsArgs, ResetArgs, RunArgs};
use crate::validate::table;
use crate::{Failure, assemble};

pub fn checkpoints(args: CheckpointsArgs) -> Result<(), Failure> {
    match args.action {
        CheckpointsAction::List(args) => list(args),
        CheckpointsAction::Reset(args) => reset(args),
    }
}

fn list(args: RunArgs) -> Result<(), Failure> {
    let config = assemble::load(&args.config.config)?;
    let store = assemble::open_store(&args.data_dir)?;
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

fn reset(args: ResetArgs) -> Result<(), Failure> {
    let config = assemble::load(&args.run.config.config)?;
    let mut keys = Vec::new();
    let mut marks = Vec::new();
    for pipeline in &config.pipelines {
        if args.pipeline.as_ref().is_some_and(|p| *p != pipeline.name) {
            continue;
        }
        for sink in &pipeline.sinks {
            if args.sink.as_ref().is_none_or(|s| s == sink.id()) {
                keys.push(CheckpointKey::new(pipeline.source.id(), sink.id()));
                let dir = args.run.data_dir.join("detached").join(&pipeline.name);
                marks.push(sluice_runtime::detach_mark(&dir, sink.id()));
            }
        }
    }
    if keys.is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "no sink matches --pipeline {:?} --sink {:?}; hint: run `sluice checkpoints list` to see the names",
            args.pipeline.unwrap_or_default(),
            args.sink.unwrap_or_default()
        )));
    }
    if !args.yes {
        return Err(Failure::bad_input(anyhow!(
            "this deletes {} checkpoint(s), and sinks that do not store their own position will receive their events again; hint: add --yes to confirm",
            keys.len()
        )));
    }
    let store = assemble::open_store(&args.run.data_dir)?;
    let removed = store.remove(&keys).map_err(Failure::pipeline)?;
    println!("removed {removed} checkpoint(s)");
    // A detached sink whose checkpoint is reset starts over, so it no
    // longer needs the resync its mark asks for.
    for mark in marks {
        match std::fs::remove_file(&mark) {
            Ok(()) => println!("cleared the detachment mark {}", mark.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Failure::pipeline(anyhow!("cannot remove {}: {e}", mark.display()))),
        }
    }
    Ok(())
}
