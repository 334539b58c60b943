//! `sluice run`: every pipeline of the config in one process.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use sluice_config::PipelineConfig;
use sluice_runtime::{Pipeline, RunReport, Shutdown};
use sluice_store::Store;
use tokio::signal::unix::Signal;
use tracing::{error, info, warn};

use crate::cli::ServeArgs;
use crate::fleet::{self, Fleet};
use crate::reload::Reloader;
use crate::{Failure, api, assemble};

pub fn run(serve: ServeArgs) -> Result<(), Failure> {
    let args = serve.run;
    let config = assemble::load(&args.config.config)?;
    let api_on = serve.api_addr != "off";
    // The API's settings are checked before the data dir is created, so
    // a mistyped flag leaves nothing behind.
    let hosts = api::AllowedHosts::parse(&serve.api_allowed_hosts).map_err(Failure::bad_input)?;
    let listener = if api_on { Some(api::bind(&serve.api_addr).map_err(Failure::bad_input)?) } else { None };
    let instance = serve.instance_id.clone().unwrap_or_else(fleet::default_instance);
    let (store, fleet_store) = open_store(&config, &args.data_dir, serve.fleet.then_some(instance.as_str()))?;
    let metrics = if api_on { Some(api::install_metrics(&config).map_err(Failure::bad_input)?) } else { None };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = serve.worker_threads {
        runtime.worker_threads(usize::from(threads));
    }
    let runtime = runtime
        .enable_all()
        .thread_name("sluice")
        .build()
        .map_err(|e| Failure::pipeline(anyhow!("cannot start the async runtime: {e}")))?;
    // Listening before the API answers or a pipeline starts: a signal
    // sent once the process shows itself is never lost.
    let listening = {
        let _entered = runtime.enter();
        listen_for_signals()
    };
    let fleet = match fleet_store {
        Some(pg) => Some(join_fleet(&runtime, &config, pg, instance, &args.data_dir)?),
        None => None,
    };
    let mut pipelines = Vec::new();
    for pipeline in &config.pipelines {
        pipelines.push((pipeline.name.clone(), assemble::pipeline(pipeline, store.clone(), &args.data_dir)?));
    }
    let handles: Vec<_> = pipelines.iter().map(|(_, p)| p.handle.clone()).collect();
    let config_pipelines = config.pipelines.clone();
    let store_again = store.clone();
    let catalog = api::Catalog::new(config, handles.clone());
    let (to_fleet, changes) = tokio::sync::mpsc::channel(1);
    let reloader = Arc::new(Reloader::new(
        args.config.config.clone(),
        args.data_dir.clone(),
        store.clone(),
        catalog.clone(),
        fleet.is_some().then_some(to_fleet),
    ));
    let result = runtime.block_on(async move {
        let server = match (metrics, listener) {
            (Some(metrics), Some(listener)) => {
                Some(serve_api(listener, hosts, catalog, reloader.clone(), store, metrics)?)
            }
            _ => None,
        };
        let shutdown = Shutdown::new();
        let signals = tokio::spawn(watch_signals(listening, shutdown.clone(), reloader));
        let result = match fleet {
            Some(fleet) => fleet
                .run(config_pipelines.into_iter().zip(handles).collect(), changes, shutdown)
                .await
                .map_err(Failure::pipeline),
            None => run_alone(pipelines, &config_pipelines, store_again, &args.data_dir, shutdown).await,
        };
        signals.abort();
        if let Some(server) = server {
            server.abort();
        }
        result
    });
    // Every pipeline has stopped and saved its checkpoints. A blocking call
    // a sink gave up on (a Kafka client waiting out its broker timeout)
    // may still run; dropping the runtime would wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// Runs every pipeline here until all end; the first failure stops them
/// all.
async fn run_alone(
    pipelines: Vec<(String, Pipeline)>,
    configs: &[PipelineConfig],
    store: Arc<dyn Store>,
    data_dir: &std::path::Path,
    shutdown: Shutdown,
) -> Result<(), Failure> {
    let mut runs = Vec::new();
    for ((name, pipeline), pipeline_config) in pipelines.into_iter().zip(configs) {
        let again = Again {
            config: pipeline_config.clone(),
            store: store.clone(),
            checkpoints: None,
            data_dir: data_dir.to_path_buf(),
        };
        let run = run_with_rereads(pipeline, again, shutdown.clone());
        let shutdown = shutdown.clone();
        runs.push((
            name,
            tokio::spawn(async move {
                let result = run.await;
                if result.is_err() {
                    // One pipeline failing stops the process, so an
                    // orchestrator sees the failure and restarts it.
                    shutdown.trigger();
                }
                result
            }),
        ));
    }
    let mut first_error = None;
    for (name, handle) in runs {
        match handle.await {
            Ok(Ok(report)) => {
                info!(pipeline = %name, checkpoints = %report, "pipeline done")
            }
            Ok(Err(err)) => {
                error!(pipeline = %name, error = %err, "pipeline failed");
                first_error.get_or_insert(anyhow!(err));
            }
            Err(err) => {
                first_error.get_or_insert(anyhow!("pipeline {name} task failed: {err}"));
            }
        }
    }
    match first_error {
        Some(err) => Err(Failure::pipeline(err)),
        None => Ok(()),
    }
}

fn serve_api(
    listener: std::net::TcpListener,
    hosts: api::AllowedHosts,
    catalog: Arc<api::Catalog>,
    reloader: Arc<Reloader>,
    store: Arc<dyn Store>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> Result<tokio::task::JoinHandle<()>, Failure> {
    let token = std::env::var(api::TOKEN_ENV).ok().filter(|t| !t.is_empty());
    let state = api::Api { catalog, reloader, store, metrics, token, history: Default::default() };
    api::serve(listener, hosts, Arc::new(state)).map_err(Failure::bad_input)
}

/// The config's store; in a fleet, as this instance's member of it, which
/// the fleet's leases need too.
fn open_store(
    config: &sluice_config::Config,
    data_dir: &std::path::Path,
    fleet_instance: Option<&str>,
) -> Result<(Arc<dyn Store>, Option<sluice_store::PgStore>), Failure> {
    match fleet_instance {
        Some(instance) => {
            assemble::check_fleet(config)?;
            let pg = assemble::open_fleet_store(config, instance)?;
            Ok((Arc::new(pg.clone()), Some(pg)))
        }
        None if config.fleet.is_some() => Err(Failure::bad_input(anyhow!(
            "fleet: the section applies to `sluice run --fleet`; hint: add --fleet, or remove the section to run alone"
        ))),
        None => Ok((assemble::open_store(config, data_dir)?, None)),
    }
}

/// This instance as a member of the config's fleet, once its lease
/// service answers: one that cannot be reached at start is bad input.
fn join_fleet(
    runtime: &tokio::runtime::Runtime,
    config: &sluice_config::Config,
    store: sluice_store::PgStore,
    instance: String,
    data_dir: &std::path::Path,
) -> Result<Fleet, Failure> {
    let fleet = Fleet::new(&config.fleet(), store, instance, data_dir.to_path_buf()).map_err(Failure::bad_input)?;
    runtime
        .block_on(fleet.leases.list())
        .map_err(|e| Failure::bad_input(anyhow!("fleet.leases: cannot list the fleet's leases: {e:#}")))?;
    Ok(fleet)
}

/// What it takes to build a pipeline again.
pub(crate) struct Again {
    pub config: PipelineConfig,
    pub store: Arc<dyn Store>,
    /// The checkpoints' store when it is not `store` itself: in a fleet,
    /// the one fenced by the pipeline's lease.
    pub checkpoints: Option<Arc<dyn sluice_core::CheckpointStore>>,
    pub data_dir: PathBuf,
}

/// Runs a pipeline, and runs it again while a sink whose buffer overflowed
/// asks for the source to be re-read from its checkpoint: the pipeline is
/// built anew, as a restart would, but keeps its status and controls.
pub(crate) async fn run_with_rereads(
    mut pipeline: Pipeline,
    again: Again,
    shutdown: Shutdown,
) -> anyhow::Result<RunReport> {
    loop {
        let handle = pipeline.handle.clone();
        let report = pipeline.run(shutdown.clone()).await?;
        if report.rereads.is_empty() || shutdown.is_triggered() {
            return Ok(report);
        }
        info!(
            pipeline = %again.config.name, sinks = ?report.rereads,
            "running the pipeline again to re-read the source for sinks whose buffer overflowed"
        );
        pipeline = assemble::pipeline(&again.config, again.store.clone(), &again.data_dir)
            .map_err(|failure| anyhow!("cannot build pipeline {} again: {:#}", again.config.name, failure.error))?;
        pipeline.source.continues_in_process();
        if let Some(checkpoints) = &again.checkpoints {
            pipeline.store = checkpoints.clone();
        }
        // The first run's transforms, whose counts the status reports.
        pipeline.settings.transforms = handle.status.transforms();
        pipeline.handle = handle;
    }
}

/// SIGINT or SIGTERM starts an orderly shutdown; a second one exits at once
/// (checkpoints are safe either way: they only ever trail what sinks hold).
/// SIGHUP reloads the config.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

fn listen_for_signals() -> Option<Signals> {
    use tokio::signal::unix::{SignalKind, signal};
    Some(Signals {
        interrupt: signal(SignalKind::interrupt()).ok()?,
        terminate: signal(SignalKind::terminate()).ok()?,
        hangup: signal(SignalKind::hangup()).ok()?,
    })
}

async fn watch_signals(listening: Option<Signals>, shutdown: Shutdown, reloader: Arc<Reloader>) {
    let Some(mut signals) = listening else {
        warn!("cannot install signal handlers; stop sluice with SIGKILL");
        return;
    };
    let mut count = 0;
    loop {
        tokio::select! {
            _ = signals.interrupt.recv() => {}
            _ = signals.terminate.recv() => {}
            _ = signals.hangup.recv() => {
                info!("SIGHUP: reading the config again");
                // Its own task: a reload waits for removed pipelines to
                // drain, and a SIGTERM meanwhile must still be heard.
                let reloader = reloader.clone();
                tokio::spawn(async move { reloader.on_hangup().await });
                continue;
            }
        }
        if count == 0 {
            info!("signal received; draining and saving checkpoints (send again to exit at once)");
            shutdown.trigger();
        } else {
            warn!("second signal; exiting without draining");
            std::process::exit(130);
        }
        count += 1;
    }
}
