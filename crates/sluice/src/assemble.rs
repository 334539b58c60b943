//! Turns validated config into runnable pipelines.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use sluice_config::StoreConfig;
use sluice_config::{Config, PipelineConfig, SourceConfig};
use sluice_core::Source;
use sluice_generator::GeneratorSource;
use sluice_mysql::MysqlSource;
use sluice_postgres::PostgresSource;
use sluice_runtime::{Pipeline, PipelineSettings, SinkSpec};
use sluice_sinks::SinkContext;
use sluice_store::{EmbeddedStore, PgStore, PgStoreOptions, Store};

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
            // So `validate` refuses what `run` could not build.
            sink.built().map_err(|missing| Failure::bad_input(anyhow!("pipelines[{p}].sinks[{s}].type: {missing}")))?;
            sluice_sinks::preflight(sink).map_err(|(field, problem)| {
                Failure::bad_input(anyhow!("pipelines[{p}].sinks[{s}].config.{field}: {problem}"))
            })?;
        }
    }
    Ok(config)
}

/// The config's store, held by this process until it ends: the embedded
/// one in the data dir, or the PostgreSQL store.
pub fn open_store(config: &Config, data_dir: &Path) -> Result<Arc<dyn Store>, Failure> {
    open(config, data_dir).map_err(|e| store_failure(config, data_dir, e))
}

/// The store, or `None` when a running `sluice run` holds it (the caller
/// then asks that process's API).
pub fn open_store_unless_running(config: &Config, data_dir: &Path) -> Result<Option<Arc<dyn Store>>, Failure> {
    match open(config, data_dir) {
        Ok(store) => Ok(Some(store)),
        Err(sluice_core::StoreError::InUse { .. }) => Ok(None),
        Err(e) => Err(store_failure(config, data_dir, e)),
    }
}

fn open(config: &Config, data_dir: &Path) -> Result<Arc<dyn Store>, sluice_core::StoreError> {
    match config.store() {
        StoreConfig::Embedded => Ok(Arc::new(EmbeddedStore::open(data_dir)?)),
        StoreConfig::Postgres(c) => Ok(Arc::new(PgStore::open(PgStoreOptions {
            params: store_params(&c),
            schema: c.schema.clone(),
            outage: Duration::from_secs(c.outage_secs),
            hold: true,
            instance: None,
        })?)),
    }
}

/// How to reach the PostgreSQL store.
pub fn store_params(c: &sluice_config::PostgresStoreConfig) -> sluice_postgres::wire::ConnectParams {
    sluice_postgres::wire::ConnectParams {
        host: c.host.clone(),
        port: c.port,
        database: c.database.clone(),
        user: c.user.clone(),
        password: c.password.clone(),
        ssl_mode: c.ssl_mode,
        ca_file: c.ca_file.clone(),
        connect_timeout: Duration::from_secs(c.connect_timeout_secs),
    }
}

/// The PostgreSQL store as a member of a fleet: shared with the other
/// instances, with this one's instance lock.
pub fn open_fleet_store(config: &Config, instance: &str) -> Result<PgStore, Failure> {
    let StoreConfig::Postgres(c) = config.store() else {
        return Err(Failure::bad_input(anyhow!("--fleet needs store: {{ type: postgres }} in the config")));
    };
    PgStore::open(PgStoreOptions {
        params: store_params(&c),
        schema: c.schema.clone(),
        outage: Duration::from_secs(c.outage_secs),
        hold: false,
        instance: Some(instance.to_string()),
    })
    .map_err(|e| Failure::bad_input(anyhow!("store.config: {e}")))
}

/// What a fleet cannot run: state on one instance's disk.
pub fn check_fleet(config: &Config) -> Result<(), Failure> {
    if !matches!(config.store(), StoreConfig::Postgres(_)) {
        return Err(Failure::bad_input(anyhow!(
            "--fleet: the instances share checkpoints through the PostgreSQL store; hint: add store: {{ type: postgres, config: {{ ... }} }} to the config (docs/configuration.md#checkpoint-store)"
        )));
    }
    for (p, pipeline) in config.pipelines.iter().enumerate() {
        for (s, sink) in pipeline.sinks.iter().enumerate() {
            let local = sink.settings().target(&on_disk);
            if let Some(target @ (sluice_sinks::Target::File(_) | sluice_sinks::Target::Folder { .. })) = local {
                return Err(Failure::bad_input(anyhow!(
                    "pipelines[{p}].sinks[{s}]: sink {:?} writes {} on this instance's disk, where another instance of the fleet cannot go on from it; hint: run it without --fleet, or use a sink every instance reaches (s3 with a bucket, kafka, postgres, ...)",
                    sink.id(),
                    target.describe()
                )));
            }
            if let sluice_sinks::SinkConfig::Kafka(kafka) = sink
                && kafka.reads_back()
            {
                return Err(Failure::bad_input(anyhow!(
                    "pipelines[{p}].sinks[{s}].config.exactly_once: read_back assumes one writer, and an instance that stalls past its lease could write a batch again after another took the pipeline over; hint: use exactly_once: true (transactions, whose transactional.id fences the old owner) or false"
                )));
            }
        }
    }
    Ok(())
}

fn store_failure(config: &Config, data_dir: &Path, e: sluice_core::StoreError) -> Failure {
    match config.store() {
        StoreConfig::Embedded => Failure::bad_input(anyhow!("--data-dir {}: {e}", data_dir.display())),
        StoreConfig::Postgres(_) => Failure::bad_input(anyhow!("store.config: {e}")),
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

/// Spill files of pipeline `name` live in `<data dir>/spill/<name>`, on
/// local disk whatever the store: they only last one run.
pub fn pipeline(config: &PipelineConfig, store: Arc<dyn Store>, data_dir: &Path) -> Result<Pipeline, Failure> {
    let state = store.state();
    let source: Box<dyn Source> = match &config.source {
        SourceConfig::Generator(c) => Box::new(GeneratorSource::new(c.clone())),
        SourceConfig::Postgres(c) => {
            Box::new(PostgresSource::new(c.clone()).with_state_dir(state.child("postgres").child(&c.id)))
        }
        SourceConfig::Mysql(c) => Box::new(MysqlSource::new(c.clone(), state.child("mysql").child(&c.id))),
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
            detach_marks: state.child("detached").child(&config.name),
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
