use sluice_core::{SinkError, SourceError, StoreError};

/// Why a pipeline stopped before its work was done.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("pipeline {pipeline:?}: source {source_id:?}: {error}")]
    Source {
        pipeline: String,
        source_id: String,
        #[source]
        error: SourceError,
    },
    #[error("pipeline {pipeline:?}: sink {sink:?}: {error}")]
    Sink {
        pipeline: String,
        sink: String,
        #[source]
        error: SinkError,
    },
    #[error("pipeline {pipeline:?}: {error}")]
    Store {
        pipeline: String,
        #[source]
        error: StoreError,
    },
    #[error("pipeline {pipeline:?}: {error}")]
    Dispatch {
        pipeline: String,
        #[source]
        error: crate::dispatch::DispatchError,
    },
    #[error(
        "pipeline {pipeline:?}: sink {sink:?} was detached for pinning the source's log ({mark}) and is now required; \
         hint: resync it first: `sluice checkpoints reset --pipeline {pipeline} --sink {sink} --yes` clears the mark"
    )]
    Detached { pipeline: String, sink: String, mark: String },
    #[error("pipeline {pipeline:?}: internal task {task} failed: {detail}; this is a bug, please report it")]
    Task { pipeline: String, task: String, detail: String },
}
