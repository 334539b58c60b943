//! `sluice snapshot --table T`: asks a running pipeline to re-read one
//! table while it streams (an incremental snapshot).

use anyhow::anyhow;
use sluice_config::{SourceConfig, glob_match};

use crate::cli::SnapshotArgs;
use crate::{Failure, assemble};

pub fn snapshot(args: SnapshotArgs) -> Result<(), Failure> {
    let config = assemble::load(&args.config.config)?;
    let reading: Vec<_> = config
        .pipelines
        .iter()
        .filter(|p| args.pipeline.as_ref().is_none_or(|name| *name == p.name))
        .filter(|p| match &p.source {
            SourceConfig::Postgres(c) => c.tables.iter().any(|pattern| glob_match(pattern, &args.table)),
            SourceConfig::Mysql(c) => c.tables.iter().any(|pattern| glob_match(pattern, &args.table)),
            SourceConfig::Generator(_) => false,
        })
        .collect();
    if reading.is_empty() {
        return Err(Failure::bad_input(anyhow!(
            "no pipeline{} in {} reads {}; hint: name the table as the source's `tables` patterns match it (schema.table)",
            args.pipeline.as_ref().map(|p| format!(" named {p:?}")).unwrap_or_default(),
            args.config.config.display(),
            args.table
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::bad_input(anyhow!("cannot start the runtime: {e}")))?;
    for pipeline in reading {
        let (id, requested) = match &pipeline.source {
            SourceConfig::Postgres(source) => {
                (&source.id, runtime.block_on(sluice_postgres::incremental::request(source, &args.table)))
            }
            SourceConfig::Mysql(source) => {
                (&source.id, runtime.block_on(sluice_mysql::incremental::request(source, &args.table)))
            }
            SourceConfig::Generator(_) => continue,
        };
        let at = requested.map_err(|e| Failure::bad_input(anyhow!("pipeline {:?}: {e}", pipeline.name)))?;
        println!(
            "pipeline {}: asked source {} to re-read {} (signal at {at}); `sluice run` logs \"incremental snapshot done\" when it is read",
            pipeline.name, id, args.table
        );
    }
    Ok(())
}
