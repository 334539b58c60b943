//! `sluice dlq list|show|purge`.

use anyhow::anyhow;
use sluice_core::DeadLetterQueue;

use crate::cli::{DlqAction, DlqArgs};
use crate::validate::table;
use crate::{Failure, assemble};

pub fn dlq(args: DlqArgs) -> Result<(), Failure> {
    match args.action {
        DlqAction::List(run) => {
            assemble::load(&run.config.config)?;
            let store = assemble::open_store(&run.data_dir)?;
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
        DlqAction::Show { run, key } => {
            assemble::load(&run.config.config)?;
            let store = assemble::open_store(&run.data_dir)?;
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
        DlqAction::Purge { run, key, all, yes } => {
            assemble::load(&run.config.config)?;
            if key.is_empty() != all {
                return Err(Failure::bad_input(anyhow!("name the keys to purge, or pass --all (not both)")));
            }
            if !yes {
                return Err(Failure::bad_input(anyhow!("purged events are gone for good; hint: add --yes to confirm")));
            }
            let store = assemble::open_store(&run.data_dir)?;
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
