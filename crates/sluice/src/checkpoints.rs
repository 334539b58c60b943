//! `sluice checkpoints list|reset`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use sluice_config::SourceConfig;
use sluice_core::{CheckpointKey, CheckpointStore};

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
    let Some(store) = assemble::open_store_unless_running(&args.data_dir)? else {
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
    /// The MySQL source's schema history, which only holds for the old log.
    schema_history: Option<PathBuf>,
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
                let dir = args.run.data_dir.join("detached").join(&pipeline.name);
                marks.push(sluice_runtime::detach_mark(&dir, sink.id()));
            }
        }
        if keys.is_empty() {
            continue;
        }
        let whole_source = args.sink.is_none();
        let schema_history = match &pipeline.source {
            SourceConfig::Mysql(c) if whole_source => {
                Some(args.run.data_dir.join("mysql").join(&c.id).join("schema_history.jsonl"))
            }
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
    let store = assemble::open_store(&args.run.data_dir)?;
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
        if let Some(history) = &reset.schema_history {
            archive(history)?;
        }
    }
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

/// Moves the schema history aside (kept, not deleted, for whoever wants to
/// see what it held): its positions are of the old log, so the source
/// reads each table's schema again the first time it sees the table.
fn archive(history: &Path) -> Result<(), Failure> {
    let mut aside = history.as_os_str().to_owned();
    aside.push(format!(".before-reset-{}", sluice_core::time::now_us()));
    let aside = PathBuf::from(aside);
    match std::fs::rename(history, &aside) {
        Ok(()) => {
            println!("moved the schema history {} to {}", history.display(), aside.display());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Failure::pipeline(anyhow!(
            "cannot move the schema history {} aside: {e}; hint: move it away by hand before the next `sluice run`",
            history.display()
        ))),
    }
}
