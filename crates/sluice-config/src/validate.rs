//! Pure validation of what is the pipeline's (names and ids, batch, commit
//! policy, SLOs); each source is checked in `sources.rs`, each sink checks
//! its own config (`SinkSettings::validate`).
//! No I/O. Every error names the field path and the fix.

use std::collections::HashSet;

use sluice_core::settings::{Invalid, check_id, check_range, check_seconds};
use sluice_sinks::SinkConfig;

use crate::pipeline::{BatchConfig, CommitPolicy, Config, PipelineConfig, PolicyMode, SourceConfig};
use crate::sources::validate_source;

/// The largest batch in events: far past any throughput gain, and short
/// of sizes whose buffers would exhaust memory before the first write.
pub const MAX_BATCH_EVENTS: u64 = 1_000_000;
/// The largest batch in bytes (1 GiB).
pub const MAX_BATCH_BYTES: u64 = 1 << 30;
/// The most batches in flight per sink; each holds its events in memory,
/// and the runtime's semaphore has a far lower limit than `usize::MAX`.
pub const MAX_INFLIGHT: u64 = 1024;
/// The largest `slo.max_retained_wal_bytes` (1 PiB).
pub const MAX_RETAINED_WAL_BYTES: u64 = 1 << 50;

pub fn validate(config: &Config) -> Result<(), Invalid> {
    if let Some(fleet) = &config.fleet {
        crate::fleet::validate_fleet(fleet)?;
    }
    if let Some(store) = &config.store {
        crate::store::validate_store(store)?;
    }
    if config.pipelines.is_empty() {
        return Err(Invalid::new("pipelines", "no pipeline is defined", "add at least one entry under `pipelines:`"));
    }
    let mut names = HashSet::new();
    let mut source_ids = HashSet::new();
    for (index, pipeline) in config.pipelines.iter().enumerate() {
        let at = format!("pipelines[{index}]");
        check_id(&format!("{at}.name"), &pipeline.name)?;
        if !names.insert(pipeline.name.as_str()) {
            return Err(Invalid::new(
                format!("{at}.name"),
                format!("pipeline name {:?} is used twice", pipeline.name),
                "give every pipeline its own name",
            ));
        }
        let source_id = pipeline.source.id();
        if !source_ids.insert(source_id) {
            return Err(Invalid::new(
                format!("{at}.source.config.id"),
                format!("source id {source_id:?} is used by two pipelines; their checkpoints would collide"),
                "give every pipeline's source its own id",
            ));
        }
        validate_pipeline(&at, pipeline)?;
    }
    crate::target::shared_target(config, &sluice_sinks::target::normalize)
}

fn validate_pipeline(at: &str, pipeline: &PipelineConfig) -> Result<(), Invalid> {
    validate_source(&format!("{at}.source.config"), &pipeline.source)?;
    if pipeline.sinks.is_empty() {
        return Err(Invalid::new(format!("{at}.sinks"), "the pipeline has no sink", "add at least one sink"));
    }
    let mut sink_ids = HashSet::new();
    for (index, sink) in pipeline.sinks.iter().enumerate() {
        let sink_at = format!("{at}.sinks[{index}].config");
        check_id(&format!("{sink_at}.id"), sink.id())?;
        if !sink_ids.insert(sink.id()) {
            return Err(Invalid::new(
                format!("{sink_at}.id"),
                format!("sink id {:?} is used twice in pipeline {:?}", sink.id(), pipeline.name),
                "give every sink of a pipeline its own id; the id keys its checkpoint",
            ));
        }
        sink.settings().validate(&sink_at)?;
        sink.buffer().validate(&sink_at)?;
        validate_delivery(&sink_at, sink)?;
        let exactly_once = sink.guarantee().is_exactly_once().then(|| sink.id());
        validate_transforms(&sink_at, sink.transforms(), exactly_once)?;
    }
    let exactly_once = pipeline.sinks.iter().find(|s| s.guarantee().is_exactly_once()).map(SinkConfig::id);
    validate_transforms(at, &pipeline.transforms, exactly_once)?;
    validate_batch(&format!("{at}.batch"), &pipeline.batch)?;
    validate_policy(&format!("{at}.commit_policy"), &pipeline.commit_policy, &pipeline.sinks)?;
    let dead_letter_at = format!("{at}.dead_letter");
    check_range(&dead_letter_at, "max_entries", pipeline.dead_letter.max_entries as u64, 1, 100_000_000, "letters")?;
    validate_slo(&format!("{at}.slo"), pipeline)?;
    check_seconds(at, "reattach_probe_secs", pipeline.reattach_probe_secs, 86_400)?;
    check_seconds(at, "shutdown_grace_secs", pipeline.shutdown_grace_secs, 86_400)?;
    check_seconds(at, "sink_batch_deadline_secs", pipeline.sink_batch_deadline_secs, 86_400)
}

fn validate_slo(at: &str, pipeline: &PipelineConfig) -> Result<(), Invalid> {
    let slo = &pipeline.slo;
    check_seconds(at, "max_failing_secs", slo.max_failing_secs, 86_400)?;
    check_seconds(at, "breach_after_secs", slo.breach_after_secs, 3_600)?;
    check_seconds(at, "clear_after_secs", slo.clear_after_secs, 3_600)?;
    if let Some(lag) = slo.max_lag_seconds {
        check_seconds(at, "max_lag_seconds", lag, 7 * 86_400)?;
    }
    check_seconds(at, "duplicate_window_secs", slo.duplicate_window_secs, 86_400)?;
    if let Some(ratio) = slo.max_duplicate_ratio {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(Invalid::new(
                format!("{at}.max_duplicate_ratio"),
                format!("{ratio} is not a share of events above 0 and at most 1"),
                "write e.g. 0.01 for at most 1 % of events written again",
            ));
        }
        if !pipeline.sinks.iter().any(|s| matches!(s.guarantee(), sluice_core::Guarantee::AtLeastOnce { .. })) {
            return Err(Invalid::new(
                format!("{at}.max_duplicate_ratio"),
                "no sink of the pipeline is at-least-once, so none writes events again",
                "remove it, or add the at-least-once sink it is meant for",
            ));
        }
    }
    if let Some(bytes) = slo.max_retained_wal_bytes {
        check_range(
            at,
            "max_retained_wal_bytes",
            bytes,
            1,
            MAX_RETAINED_WAL_BYTES,
            "bytes (e.g. 10737418240 for 10 GiB)",
        )?;
    }
    if slo.max_retained_wal_bytes.is_some() && !matches!(pipeline.source, SourceConfig::Postgres(_)) {
        return Err(Invalid::new(
            format!("{at}.max_retained_wal_bytes"),
            "only a PostgreSQL source has a slot that retains WAL",
            "remove it; MySQL and MariaDB keep binlogs by age and size, whatever Sluice has read",
        ));
    }
    if slo.detach_optional_sinks {
        if slo.max_retained_wal_bytes.is_none() {
            return Err(Invalid::new(
                format!("{at}.detach_optional_sinks"),
                "needs max_retained_wal_bytes: it acts on a breach of it",
                "set max_retained_wal_bytes too, or remove detach_optional_sinks",
            ));
        }
        if pipeline.commit_policy.mode == PolicyMode::All {
            return Err(Invalid::new(
                format!("{at}.detach_optional_sinks"),
                "commit_policy.mode all waits for every sink, so no sink can be detached",
                "use commit_policy.mode required or quorum, or remove detach_optional_sinks",
            ));
        }
    }
    Ok(())
}

/// At-most-once is for optional sinks whose write is durable when it
/// returns, so every event a failure loses is one the count names.
fn validate_delivery(at: &str, sink: &SinkConfig) -> Result<(), Invalid> {
    if sink.delivery() != sluice_sinks::Delivery::AtMostOnce {
        return Ok(());
    }
    if sink.required() {
        return Err(Invalid::new(
            format!("{at}.delivery"),
            "at_most_once drops the batches the sink fails to write, but a required sink holds the pipeline \
             until it has every event",
            "set required: false beside delivery: at_most_once, or remove delivery",
        ));
    }
    if sink.type_name() == "s3" {
        return Err(Invalid::new(
            format!("{at}.delivery"),
            "the s3 sink commits a file after it took the file's events, so a failed commit would lose events \
             no count could name",
            "remove delivery: the s3 sink is exactly-once at file level",
        ));
    }
    Ok(())
}

fn validate_batch(at: &str, batch: &BatchConfig) -> Result<(), Invalid> {
    check_range(at, "max_events", batch.max_events as u64, 1, MAX_BATCH_EVENTS, "events")?;
    check_range(at, "max_bytes", batch.max_bytes as u64, 1, MAX_BATCH_BYTES, "bytes")?;
    check_range(at, "max_ms", batch.max_ms, 1, 3_600_000, "milliseconds")?;
    check_range(at, "max_inflight", batch.max_inflight as u64, 1, MAX_INFLIGHT, "batches")
}

fn validate_policy(at: &str, policy: &CommitPolicy, sinks: &[SinkConfig]) -> Result<(), Invalid> {
    match (policy.mode, policy.quorum) {
        (PolicyMode::Quorum, None) => Err(Invalid::new(
            format!("{at}.quorum"),
            "mode quorum needs a quorum",
            format!("set quorum to a number from 1 to {}", sinks.len()),
        )),
        (PolicyMode::Quorum, Some(n)) if n == 0 || n > sinks.len() => Err(Invalid::new(
            format!("{at}.quorum"),
            format!("quorum {n} is outside 1..={}, the pipeline's sink count", sinks.len()),
            format!("set quorum to a number from 1 to {}", sinks.len()),
        )),
        (PolicyMode::Required | PolicyMode::All, Some(_)) => Err(Invalid::new(
            format!("{at}.quorum"),
            "quorum is only read with mode: quorum",
            "remove quorum, or set mode: quorum",
        )),
        (PolicyMode::Required, None) if !sinks.iter().any(SinkConfig::required) => Err(Invalid::new(
            format!("{at}.mode"),
            "mode required with no required sink would let checkpoints advance on nothing",
            "mark at least one sink `required: true`, or choose mode all or quorum",
        )),
        _ => Ok(()),
    }
}

/// Builds each step of a `transforms:` list under `at`. A step whose
/// output a replay would not repeat is refused where `exactly_once` names
/// a sink that gets what it writes.
fn validate_transforms(
    at: &str,
    transforms: &[sluice_transform::TransformConfig],
    exactly_once: Option<&str>,
) -> Result<(), Invalid> {
    for (index, transform) in transforms.iter().enumerate() {
        let field = format!("{at}.transforms[{index}]");
        let fix = "fix the transform's settings; docs/transforms.md describes each one";
        transform.check().map_err(|problem| Invalid::new(field.clone(), problem, fix))?;
        if let Some(sink) = exactly_once
            && let Some(function) = transform.nondeterministic().map_err(|p| Invalid::new(field.clone(), p, fix))?
        {
            return Err(Invalid::new(
                field,
                format!(
                    "the script calls {function}, whose value a replay would not repeat, and sink {sink:?} is exactly-once: after a crash it would get other bytes for the same event"
                ),
                "take the value from the event (source.commit_time_us, source.position), or make the sink at-least-once",
            ));
        }
    }
    Ok(())
}
