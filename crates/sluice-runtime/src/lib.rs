//! The coordinator. It keeps the promises of `docs/guarantees.md`:
//! transaction-aware batching, bounded in-flight batches, concurrent
//! fan-out, per-sink replay filtering, durable watermarks, the commit
//! policy frontier, atomic checkpoint commits, per-call deadlines,
//! in-process retries, and ordered shutdown. See [`pipeline`] for the data
//! flow and `docs/architecture.md` for where this crate sits.
//!
//! A pipeline's figures ([`status::PipelineStatus`]) are written only by
//! its own tasks and read by everyone else; what an operator or the SLO
//! monitor asks of it goes through [`PipelineControl`]. Both come in a
//! [`PipelineHandle`].

pub mod backoff;
pub mod batch;
mod buffer;
mod checkpointer;
pub mod control;
mod deadline;
mod dispatch;
mod drain;
mod error;
mod intake;
pub mod latency;
pub mod latency_buckets;
mod monitor;
pub mod pipeline;
pub mod policy;
mod shutdown;
pub mod spill;
pub mod status;
mod transform_pool;
mod writer;

pub use control::{PipelineControl, PipelineHandle, ReattachError, RedeliverError};
pub use error::PipelineError;
pub use pipeline::{Pipeline, PipelineSettings, RunReport, SinkSpec, detach_mark, handle_of};
pub use shutdown::Shutdown;
pub use status::{PipelineStatus, PipelineView};
