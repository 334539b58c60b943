//! Turns validated config into runnable pipelines.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use sluice_config::{Config, PipelineConfig, SourceConfig};
use sluice_core::Source;
use sluice_generator::GeneratorSource;
use sluice_mysql::MysqlSource;
use sluice_postgres::PostgresSource;
use sluice_runtime::{Pipeline, PipelineSettings, SinkSpec};
use sluice_sinks::SinkContext;
use sluice_store::EmbeddedStore;

use crate::Failure;

/// Loads and validates a config, then checks what can be checked without
/// writing anything. Every failure is bad input.
pub fn load(path: &Path) -> Result<Config, Failure> {
    let config = sluice_config::load(path).map_err(Failure::bad_input)?;
    // Validation compared paths as written; here they are compared as the
    // disk sees them, so `out/x` and `/abs/out/x`, or two names through a
    // symlinked folder, are one file too.
    sluice_config::shared_target(&config, &on_disk)
        .map_err(|e| Failure::bad_input(sluice_config::ConfigError::Invalid(e)))?;
    for (p, pipeline) in config.pipelines.iter().enumerate() {
        for (s, sink) in pipeline.sinks.iter().enumerate() {
            sluice_sinks::preflight(sink).map_err(|(field, problem)| {
                Failure::bad_input(anyhow!("pipelines[{p}].sinks[{s}].config.{field}: {problem}"))
            })?;
        }
    }
    Ok(config)
}

pub fn open_store(data_dir: &Path) -> Result<Arc<EmbeddedStore>, Failure> {
    let store = EmbeddedStore::open(data_dir)
        .map_err(|e| Failure::bad_input(anyhow!("--data-dir {}: {e}", data_dir.display())))?;
    Ok(Arc::new(store))
}

/// The store, or `None` when a running `sluice run` holds it open (the
/// caller then asks that process's API).
pub fn open_store_unless_running(data_dir: &Path) -> Result<Option<Arc<EmbeddedStore>>, Failure> {
    match EmbeddedStore::open(data_dir) {
        Ok(store) => Ok(Some(Arc::new(store))),
        Err(sluice_core::StoreError::InUse { .. }) => Ok(None),
        Err(e) => Err(Failure::bad_input(anyhow!("--data-dir {}: {e}", data_dir.display()))),
    }
}

/// `path` made absolute against the working dir (relative paths are read
/// from it), with its deepest existing folder resolved through symlinks.
fn on_disk(path: &Path) -> std::path::PathBuf {
    let absolute = std::env::current_dir().map(|dir| dir.join(path)).unwrap_or_else(|_| path.to_path_buf());
    let absolute = sluice_config::normalize(&absolute);
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    while let Some(parent) = existing.parent() {
        if let Ok(resolved) = existing.canonicalize() {
            return rest.iter().rev().fold(resolved, |p, part| p.join(part));
        }
        if let Some(name) = existing.file_name() {
            rest.push(name.to_os_string());
        }
        existing = parent;
    }
    absolute
}

/// Spill files of pipeline `name` live in `<data dir>/spill/<name>`.
pub fn pipeline(config: &PipelineConfig, store: Arc<EmbeddedStore>, data_dir: &Path) -> Result<Pipeline, Failure> {
    let source: Box<dyn Source> = match &config.source {
        SourceConfig::Generator(c) => Box::new(GeneratorSource::new(c.clone())),
        SourceConfig::Postgres(c) => {
            Box::new(PostgresSource::new(c.clone()).with_state_dir(data_dir.join("postgres").join(&c.id)))
        }
        SourceConfig::Mysql(c) => Box::new(MysqlSource::new(c.clone(), data_dir.join("mysql").join(&c.id))),
    };
    let context = SinkContext {
        pipeline: config.name.clone(),
        source_id: config.source.id().to_string(),
        data_dir: data_dir.to_path_buf(),
    };
    let mut sinks = Vec::new();
    for sink in &config.sinks {
        let built = sluice_sinks::build(sink, &context).map_err(Failure::bad_input)?;
        let transforms = sluice_transform::Transforms::build(sink.transforms())
            .map_err(|e| Failure::bad_input(anyhow!("pipeline {:?}, sink {:?}: {e}", config.name, sink.id())))?;
        sinks.push(SinkSpec {
            sink: built,
            required: sink.required(),
            buffer: sink.buffer_limits(),
            at_most_once: sink.delivery() == sluice_sinks::Delivery::AtMostOnce,
            transforms: Arc::new(transforms),
        });
    }
    let kind = match &config.source {
        SourceConfig::Generator(_) => "generator",
        SourceConfig::Postgres(_) => "postgres",
        SourceConfig::Mysql(_) => "mysql",
    };
    let handle = sluice_runtime::handle_of(&config.name, source.as_ref(), kind, &sinks);
    let transforms = sluice_transform::Transforms::build(&config.transforms)
        .map_err(|e| Failure::bad_input(anyhow!("pipeline {:?}: {e}", config.name)))?;
    handle.status.set_transforms(Arc::new(transforms));
    Ok(Pipeline {
        settings: PipelineSettings {
            slo: config.slo.clone(),
            detach_dir: data_dir.join("detached").join(&config.name),
            name: config.name.clone(),
            batch: config.batch.clone(),
            commit_policy: config.commit_policy.clone(),
            sink_batch_deadline: Duration::from_secs(config.sink_batch_deadline_secs),
            reattach_probe: Duration::from_secs(config.reattach_probe_secs),
            shutdown_grace: Duration::from_secs(config.shutdown_grace_secs),
            spill_dir: data_dir.join("spill").join(&config.name),
            dead_letter: config.dead_letter.clone(),
            transforms: handle.status.transforms(),
        },
        source,
        sinks,
        store: store.clone(),
        dead_letters: store,
        handle,
    })
}
