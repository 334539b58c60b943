//! The object storage sink (`type: s3`): Parquet, JSON Lines or Avro files on S3
//! or on local disk, exactly-once at file level.
//!
//! Events go to one open file per partition (`table=<t>/date=<day>`, by
//! commit time in UTC), staged on local disk. A file is committed when it
//! reaches `max_file_bytes`, `max_file_events` or `max_file_age_secs`, when
//! its schema changes, and on flush: first its claim, a small object named
//! by the file's first position and created only if absent, then the file
//! itself (on S3 with one PUT or a multipart upload, locally with a
//! rename); before that no reader sees it. The sink reports as durable
//! only what committed files hold, so the checkpoint never passes an event
//! that is still in a staged file.
//!
//! After a crash, the coordinator replays from the checkpoint. The first
//! time the sink meets a partition it lists its files and claims: names
//! carry the first and last position they hold, and within a partition
//! claims cover its events one after another, so every replayed event at
//! or below the partition's highest committed position is skipped
//! (adopted) rather than written again, and a file claimed but missing
//! (its commit cut short) is written again with exactly its claimed
//! events. Two writers of one prefix (in a fleet, an owner that stalled
//! past its lease and the instance that took its pipeline over) meet at
//! the claims: the second to claim a position is refused and lists the
//! partition again. A reader listing the prefix therefore never sees an
//! event in two files. A multipart upload in flight at the crash is
//! recorded in the staging folder and aborted on the next start.

#[cfg(feature = "s3")]
mod avro;
#[cfg(feature = "s3")]
mod columns;
pub mod config;
#[cfg(feature = "s3")]
mod jsonl;
#[cfg(feature = "s3")]
mod names;
#[cfg(feature = "s3")]
mod parquet;
#[cfg(feature = "s3")]
mod profile;
#[cfg(feature = "s3")]
mod sink;
#[cfg(feature = "s3")]
mod target;

pub use config::*;
#[cfg(feature = "s3")]
pub use sink::ObjectSink;

#[cfg(feature = "s3")]
pub fn build(config: &S3SinkConfig, context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(ObjectSink::new(config.clone(), &context.pipeline, &context.data_dir))
}
