//! The coordinator. It implements the promises of DESIGN.md §1 and §3:
//! transaction-aware batching, bounded in-flight batches, concurrent
//! fan-out, per-sink replay filtering, durable watermarks, the commit
//! policy frontier, atomic checkpoint commits, per-call deadlines,
//! in-process retries, and ordered shutdown. See [`pipeline`] for the data
//! flow.

pub mod backoff;
pub mod batch;
mod checkpointer;
mod dispatch;
mod error;
mod intake;
pub mod latency;
mod monitor;
pub mod pipeline;
pub mod policy;
mod shutdown;
pub mod spill;
pub mod status;
mod writer;

pub use error::PipelineError;
pub use pipeline::{Pipeline, PipelineSettings, RunReport, SinkSpec, detach_mark, status_of};
pub use shutdown::Shutdown;
pub use status::PipelineStatus;
