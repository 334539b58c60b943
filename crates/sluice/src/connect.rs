//! `sluice validate --connect`: each source and sink reached, and what a
//! first run needs of it checked, one line per check.

use std::time::Duration;

use anyhow::anyhow;
use sluice_config::{Config, PipelineConfig, SourceConfig};
use sluice_core::preflight::{Check, Outcome};
use sluice_sinks::SinkContext;

use crate::Failure;

/// How long one source's or sink's checks may take before they count as
/// failed: a server that does not answer at all.
const CHECK_DEADLINE: Duration = Duration::from_secs(60);

pub fn check(config: &Config) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::pipeline(anyhow!("cannot start the async runtime: {e}")))?;
    let mut failed = 0;
    if let sluice_config::StoreConfig::Postgres(store) = config.store() {
        let params = crate::assemble::store_params(&store);
        let checks = runtime.block_on(within(sluice_store::pg_preflight::checks(&params, &store.schema)));
        failed += show(&format!("store: postgres, schema {}", store.schema), &checks);
    }
    if let Some(sluice_config::FleetConfig { leases: sluice_config::LeasesConfig::Etcd(etcd), .. }) = &config.fleet {
        let checks = runtime.block_on(within(crate::fleet::etcd_checks(etcd)));
        failed += show(&format!("fleet: etcd leases, {}", etcd.endpoints.join(", ")), &checks);
    }
    for pipeline in &config.pipelines {
        let source = &pipeline.source;
        let checks = runtime.block_on(within(source_checks(source)));
        failed +=
            show(&format!("pipeline {}: source {} ({})", pipeline.name, source.id(), source.type_name()), &checks);
        for sink in &pipeline.sinks {
            let checks = runtime.block_on(within(sink_checks(pipeline, sink)));
            failed += show(&format!("pipeline {}: sink {} ({})", pipeline.name, sink.id(), sink.type_name()), &checks);
        }
    }
    if failed > 0 {
        return Err(Failure::bad_input(anyhow!("{failed} check(s) failed; a first run would stop at them")));
    }
    println!("every source, sink, store and lease service answered as a first run needs");
    Ok(())
}

async fn within(checks: impl Future<Output = Vec<Check>>) -> Vec<Check> {
    match tokio::time::timeout(CHECK_DEADLINE, checks).await {
        Ok(checks) => checks,
        Err(_) => vec![Check::fail(
            "answer",
            format!("no answer within {}s", CHECK_DEADLINE.as_secs()),
            "check the address and that nothing between drops the connection",
        )],
    }
}

async fn source_checks(source: &SourceConfig) -> Vec<Check> {
    match source {
        SourceConfig::Postgres(config) => sluice_postgres::preflight::checks(config).await,
        SourceConfig::Mysql(config) => sluice_mysql::preflight::checks(config).await,
        SourceConfig::Generator(_) => vec![Check::ok("server", "nothing to reach: events are made up in the process")],
    }
}

async fn sink_checks(pipeline: &PipelineConfig, sink: &sluice_sinks::SinkConfig) -> Vec<Check> {
    let context = SinkContext {
        pipeline: pipeline.name.clone(),
        source_id: pipeline.source.id().to_string(),
        data_dir: crate::cli::DEFAULT_DATA_DIR.into(),
    };
    match sluice_sinks::build(sink, &context) {
        Ok(mut built) => built.preflight().await,
        Err(e) => vec![Check::fail("build", e.to_string(), "use a binary built with this sink type")],
    }
}

/// Prints a heading and a line per check; returns how many failed.
fn show(heading: &str, checks: &[Check]) -> usize {
    println!("{heading}");
    for check in checks {
        let line = match &check.outcome {
            Outcome::Ok(detail) => format!("  ok    {:<20} {detail}", check.name),
            Outcome::Warn { problem, fix } => format!("  WARN  {:<20} {problem}\n        fix: {fix}", check.name),
            Outcome::Fail { problem, fix } => format!("  FAIL  {:<20} {problem}\n        fix: {fix}", check.name),
        };
        println!("{}", sluice_core::redact::credentials(&line));
    }
    checks.iter().filter(|c| c.failed()).count()
}
