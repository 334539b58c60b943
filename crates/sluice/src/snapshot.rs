//! `sluice snapshot --table T`: asks a running pipeline to re-read one
//! table while it streams (an incremental snapshot); with `--wait`, follows
//! it through the running instance's API until it ends.

use anyhow::anyhow;
use sluice_config::{SourceConfig, glob_match};

use std::io::Write;

use crate::cli::SnapshotArgs;
use crate::status_cli::{call, snapshot_line};
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
        // What ended before the request, so --wait knows this request's end.
        let progress_url = format!("http://{}/pipelines/{}/snapshot", args.api_addr, pipeline.name);
        let ended_before = if args.wait { Some(runtime.block_on(last_ended(&progress_url))?) } else { None };
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
        println!("pipeline {}: asked source {} to re-read {} (signal at {at})", pipeline.name, id, args.table);
        match ended_before {
            Some(seq) => runtime.block_on(follow(&progress_url, &pipeline.name, &args.table, seq))?,
            None => println!(
                "  `sluice status` shows its progress; `sluice run` logs \"incremental snapshot done\" when it is read"
            ),
        }
    }
    Ok(())
}

/// The highest `seq` among the ended snapshots the API lists.
async fn last_ended(url: &str) -> Result<u64, Failure> {
    let body = call(reqwest::Method::GET, url).await?;
    Ok(body["ended"].as_array().into_iter().flatten().filter_map(|e| e["seq"].as_u64()).max().unwrap_or(0))
}

/// Shows the table's progress once a second until it ends after `seq`.
async fn follow(url: &str, pipeline: &str, table: &str, seq: u64) -> Result<(), Failure> {
    let mut stderr = std::io::stderr();
    let mut shown = false;
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let body = call(reqwest::Method::GET, url).await?;
        let ended = body["ended"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["seq"].as_u64() > Some(seq) && e["table"].as_str() == Some(table));
        if shown {
            let _ = write!(stderr, "\r\x1b[K");
        }
        if let Some(ended) = ended {
            if let Some(why) = ended["refused"].as_str() {
                return Err(Failure::bad_input(anyhow!(
                    "pipeline {pipeline}: the incremental snapshot of {table} was refused: {why}"
                )));
            }
            println!("pipeline {pipeline}: {table} read, {} rows", ended["rows"].as_u64().unwrap_or(0));
            return Ok(());
        }
        let running = body["running"].as_array().into_iter().flatten();
        if let Some(snapshot) =
            running.into_iter().find(|s| s["incremental"] == true && s["table"].as_str() == Some(table))
        {
            let _ = write!(stderr, "{}", snapshot_line(snapshot));
            let _ = stderr.flush();
            shown = true;
        } else {
            shown = false;
        }
    }
}
