//! `sluice run`: every pipeline of the config in one process.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use sluice_config::PipelineConfig;
use sluice_runtime::{Pipeline, RunReport, Shutdown};
use sluice_store::Store;
use tracing::{error, info, warn};

use crate::cli::ServeArgs;
use crate::{Failure, api, assemble};

pub fn run(serve: ServeArgs) -> Result<(), Failure> {
    let args = serve.run;
    let config = assemble::load(&args.config.config)?;
    let api_on = serve.api_addr != "off";
    // The API's settings are checked before the data dir is created, so
    // a mistyped flag leaves nothing behind.
    let hosts = api::AllowedHosts::parse(&serve.api_allowed_hosts).map_err(Failure::bad_input)?;
    let listener = if api_on { Some(api::bind(&serve.api_addr).map_err(Failure::bad_input)?) } else { None };
    let store = assemble::open_store(&config, &args.data_dir)?;
    let metrics = if api_on { Some(api::install_metrics(&config).map_err(Failure::bad_input)?) } else { None };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice")
        .build()
        .map_err(|e| Failure::pipeline(anyhow!("cannot start the async runtime: {e}")))?;
    let mut pipelines = Vec::new();
    for pipeline in &config.pipelines {
        pipelines.push((pipeline.name.clone(), assemble::pipeline(pipeline, store.clone(), &args.data_dir)?));
    }
    let handles = pipelines.iter().map(|(_, p)| p.handle.clone()).collect();
    let config_pipelines = config.pipelines.clone();
    let store_again = store.clone();
    let result = runtime.block_on(async move {
        let server = match (metrics, listener) {
            (Some(metrics), Some(listener)) => {
                let token = std::env::var(api::TOKEN_ENV).ok().filter(|t| !t.is_empty());
                let state = api::Api { config, pipelines: handles, store, metrics, token, history: Default::default() };
                Some(api::serve(listener, hosts, std::sync::Arc::new(state)).map_err(Failure::bad_input)?)
            }
            _ => None,
        };
        let shutdown = Shutdown::new();
        let signals = tokio::spawn(watch_signals(shutdown.clone()));
        let mut runs = Vec::new();
        for ((name, pipeline), pipeline_config) in pipelines.into_iter().zip(&config_pipelines) {
            let again =
                Again { config: pipeline_config.clone(), store: store_again.clone(), data_dir: args.data_dir.clone() };
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
        signals.abort();
        if let Some(server) = server {
            server.abort();
        }
        match first_error {
            Some(err) => Err(Failure::pipeline(err)),
            None => Ok(()),
        }
    });
    // Every pipeline has stopped and saved its checkpoints. A blocking call
    // a sink gave up on (a Kafka client waiting out its broker timeout)
    // may still run; dropping the runtime would wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// What it takes to build a pipeline again.
struct Again {
    config: PipelineConfig,
    store: Arc<dyn Store>,
    data_dir: PathBuf,
}

/// Runs a pipeline, and runs it again while a sink whose buffer overflowed
/// asks for the source to be re-read from its checkpoint: the pipeline is
/// built anew, as a restart would, but keeps its status and controls.
async fn run_with_rereads(mut pipeline: Pipeline, again: Again, shutdown: Shutdown) -> anyhow::Result<RunReport> {
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
        // The first run's transforms, whose counts the status reports.
        pipeline.settings.transforms = handle.status.transforms();
        pipeline.handle = handle;
    }
}

/// SIGINT or SIGTERM starts an orderly shutdown; a second one exits at once
/// (checkpoints are safe either way: they only ever trail what sinks hold).
async fn watch_signals(shutdown: Shutdown) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        warn!("cannot install signal handlers; stop sluice with SIGKILL");
        return;
    };
    for count in 0.. {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        if count == 0 {
            info!("signal received; draining and saving checkpoints (send again to exit at once)");
            shutdown.trigger();
        } else {
            warn!("second signal; exiting without draining");
            std::process::exit(130);
        }
    }
}
