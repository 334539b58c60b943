//! Where each sink writes, so that two sinks of one config never share a
//! target: two writers of one file, prefix, stream or topic each believe
//! they hold it alone, and an exactly-once sink then holds every event
//! twice.
//!
//! The comparison is lexical here (pure, as validation is); the binary
//! runs it again with paths resolved on disk ([`shared_target`]'s
//! `resolve`), which catches `../x` through a symlink and the like. Each
//! sink's config says what it writes (`SinkSettings::target`).

use std::path::{Path, PathBuf};

use sluice_core::settings::Invalid;
use sluice_sinks::Target;

use crate::pipeline::Config;

/// Refuses two sinks, in any pipelines of `config`, that write one
/// target. `resolve` maps a configured path to the one compared:
/// [`normalize`](crate::normalize) in validation, the binary adds the disk's view.
pub fn shared_target(config: &Config, resolve: &dyn Fn(&Path) -> PathBuf) -> Result<(), Invalid> {
    let mut seen: Vec<(String, Target)> = Vec::new();
    for (p, pipeline) in config.pipelines.iter().enumerate() {
        for (s, sink) in pipeline.sinks.iter().enumerate() {
            let Some(target) = sink.settings().target(resolve) else { continue };
            let name = format!("sink {:?} of pipeline {:?}", sink.id(), pipeline.name);
            if let Some((first, _)) = seen.iter().find(|(_, t)| t.collides(&target)) {
                return Err(Invalid::new(
                    format!("pipelines[{p}].sinks[{s}].config"),
                    format!("{name} writes {}, which {first} writes too", target.describe()),
                    "give every sink a target of its own (path, prefix, stream or topic); two writers of one target each hold the other's events",
                ));
            }
            seen.push((name, target));
        }
    }
    Ok(())
}
