//! `sluice dlq list|show|retry|purge`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;
use sluice_config::Config;
use sluice_core::{DeadLetter, Sink, SinkError};
use sluice_sinks::SinkContext;

use crate::cli::{ApiArgs, DlqAction, DlqArgs, RunArgs};
use crate::validate::table;
use crate::{Failure, assemble, remote};

pub fn dlq(args: DlqArgs) -> Result<(), Failure> {
    match args.action {
        DlqAction::List { run, api } => {
            let config = assemble::load(&run.config.config)?;
            let Some(store) = assemble::open_store_unless_running(&config, &run.data_dir)? else {
                remote::announce(&api.api_addr);
                return remote::dlq_list(&api.api_addr);
            };
            let letters = store.letters().map_err(Failure::pipeline)?;
            let mut rows = vec![["KEY".to_string(), "SINK".to_string(), "ERROR".to_string()]];
            for letter in &letters {
                let error: String = letter.error.chars().take(100).collect();
                rows.push([letter.key.clone(), letter.sink_id.clone(), error]);
            }
            print!("{}", table(&rows));
            println!("{} dead letter(s)", letters.len());
            Ok(())
        }
        DlqAction::Show { run, api, key } => {
            let config = assemble::load(&run.config.config)?;
            let Some(store) = assemble::open_store_unless_running(&config, &run.data_dir)? else {
                remote::announce(&api.api_addr);
                return remote::dlq_show(&api.api_addr, &key);
            };
            let letter =
                store.letters().map_err(Failure::pipeline)?.into_iter().find(|l| l.key == key).ok_or_else(|| {
                    Failure::bad_input(anyhow!(
                        "no dead letter has key {key:?}; hint: `sluice dlq list` prints the keys"
                    ))
                })?;
            let event: serde_json::Value =
                serde_json::from_str(&letter.event).unwrap_or(serde_json::Value::String(letter.event.clone()));
            let shown = serde_json::json!({
                "key": letter.key, "source": letter.source_id, "sink": letter.sink_id, "position": letter.position,
                "error": letter.error, "recorded_at": sluice_core::time::format_utc_micros(letter.recorded_at_us), "event": event,
            });
            println!("{}", serde_json::to_string_pretty(&shown).unwrap_or_default());
            Ok(())
        }
        DlqAction::Retry { run, api, key, all } => retry_letters(run, api, key, all),
        DlqAction::Purge { run, api, key, all, yes } => {
            let config = assemble::load(&run.config.config)?;
            if key.is_empty() != all {
                return Err(Failure::bad_input(anyhow!("name the keys to purge, or pass --all (not both)")));
            }
            if !yes {
                return Err(Failure::bad_input(anyhow!("purged events are gone for good; hint: add --yes to confirm")));
            }
            let Some(store) = assemble::open_store_unless_running(&config, &run.data_dir)? else {
                remote::announce(&api.api_addr);
                return remote::dlq_purge(&api.api_addr, key, all);
            };
            let keys = if all {
                store.letters().map_err(Failure::pipeline)?.into_iter().map(|l| l.key).collect()
            } else {
                key
            };
            let removed = store.purge(&keys).map_err(Failure::pipeline)?;
            println!("purged {removed} dead letter(s)");
            Ok(())
        }
    }
}

/// `sluice dlq retry`: through the store, or the running instance's API.
fn retry_letters(run: RunArgs, api: ApiArgs, key: Vec<String>, all: bool) -> Result<(), Failure> {
    let config = assemble::load(&run.config.config)?;
    if key.is_empty() != all {
        return Err(Failure::bad_input(anyhow!("name the keys to retry, or pass --all (not both)")));
    }
    let Some(store) = assemble::open_store_unless_running(&config, &run.data_dir)? else {
        remote::announce(&api.api_addr);
        return remote::dlq_retry(&api.api_addr, key, all);
    };
    let stored = store.letters().map_err(Failure::pipeline)?;
    let letters: Vec<DeadLetter> = if all {
        stored
    } else {
        let mut chosen = Vec::new();
        for wanted in &key {
            let letter = stored.iter().find(|l| &l.key == wanted).ok_or_else(|| {
                Failure::bad_input(anyhow!(
                    "no dead letter has key {wanted:?}; hint: `sluice dlq list` prints the keys"
                ))
            })?;
            chosen.push(letter.clone());
        }
        chosen
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::pipeline(anyhow!("cannot start the async runtime: {e}")))?;
    let delivered = runtime.block_on(retry(&config, &run.data_dir, &letters));
    let keys: Vec<String> = delivered.iter().map(|l| l.key.clone()).collect();
    store.purge(&keys).map_err(Failure::pipeline)?;
    let kept = letters.len() - keys.len();
    println!("{} delivered and removed, {kept} kept", keys.len());
    if kept > 0 {
        return Err(Failure::pipeline(anyhow!("{kept} dead letter(s) could not be delivered; they stay in the queue")));
    }
    Ok(())
}

/// Sinks built for retries, by (source id, sink id), with their deadline
/// and their own transforms.
type OpenSinks = HashMap<(String, String), (Box<dyn Sink>, Duration, sluice_transform::Transforms)>;

/// Sends each letter to its sink; returns the letters delivered.
async fn retry<'a>(config: &Config, data_dir: &Path, letters: &'a [DeadLetter]) -> Vec<&'a DeadLetter> {
    let mut sinks = OpenSinks::new();
    let mut delivered = Vec::new();
    for letter in letters {
        match retry_one(config, data_dir, letter, &mut sinks).await {
            Ok(()) => {
                println!("delivered {}", letter.key);
                delivered.push(letter);
            }
            Err(error) => {
                let text = format!("{error:#}");
                println!("kept {}: {}", letter.key, sluice_core::redact::credentials(&text));
            }
        }
    }
    for (_, (mut sink, deadline, _)) in sinks {
        let _ = tokio::time::timeout(deadline, sink.close()).await;
    }
    delivered
}

async fn retry_one(config: &Config, data_dir: &Path, letter: &DeadLetter, sinks: &mut OpenSinks) -> anyhow::Result<()> {
    let mut event = letter
        .decode_event()
        .map_err(|e| anyhow!("its stored event cannot be read back ({e}); it predates `dlq retry`, so purge it"))?;
    let id = (letter.source_id.clone(), letter.sink_id.clone());
    if !sinks.contains_key(&id) {
        let (pipeline, sink) = config
            .pipelines
            .iter()
            .filter(|p| p.source.id() == letter.source_id)
            .find_map(|p| p.sinks.iter().find(|s| s.id() == letter.sink_id).map(|s| (p, s)))
            .ok_or_else(|| {
                anyhow!(
                    "the config has no sink {:?} in a pipeline with source {:?}; hint: retry with the config the letter was written under",
                    letter.sink_id,
                    letter.source_id
                )
            })?;
        let context = SinkContext {
            pipeline: pipeline.name.clone(),
            source_id: pipeline.source.id().to_string(),
            data_dir: data_dir.to_path_buf(),
        };
        let built = sluice_sinks::build(sink, &context)?;
        let transforms = sluice_transform::Transforms::build(sink.transforms()).map_err(|e| anyhow!("{e}"))?;
        sinks.insert(id.clone(), (built, Duration::from_secs(pipeline.sink_batch_deadline_secs), transforms));
    }
    let Some((sink, deadline, transforms)) = sinks.get_mut(&id) else {
        return Err(anyhow!("sink {:?} is missing", letter.sink_id));
    };
    // A letter holds the event before the sink's own transforms.
    match transforms.apply(&mut event) {
        Ok(sluice_transform::Verdict::Keep) => {}
        Ok(sluice_transform::Verdict::Drop) => return Ok(()),
        Err(error) => return Err(anyhow!("the sink's {error}")),
    }
    match tokio::time::timeout(*deadline, sink.redeliver(&event)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(SinkError::Rejected { detail, .. })) => Err(anyhow!("the sink still refuses it: {detail}")),
        Ok(Err(error)) => Err(error.into()),
        Err(_) => Err(anyhow!("no answer within sink_batch_deadline_secs ({}s)", deadline.as_secs())),
    }
}
