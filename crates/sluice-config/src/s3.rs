//! The `s3` (object storage) sink's config.

use std::path::PathBuf;

use serde::Deserialize;

use crate::secret::Secret;

/// Largest file before it is committed (256 MiB): big enough for efficient
/// scans, small enough to upload in well under a minute.
pub const DEFAULT_S3_MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;
/// Most events in one file.
pub const DEFAULT_S3_MAX_FILE_EVENTS: u64 = 10_000_000;
/// Longest a file stays open (s). The checkpoint cannot pass an open file,
/// so this bounds how far the checkpoint trails the stream.
pub const DEFAULT_S3_MAX_FILE_AGE_SECS: u64 = 60;
/// The region when none is set, as the AWS tools assume.
pub const DEFAULT_S3_REGION: &str = "us-east-1";
/// Files up to this size go to S3 in one PUT; larger ones in parts of it.
pub const DEFAULT_S3_PART_SIZE_BYTES: u64 = 16 * 1024 * 1024;
/// S3's smallest part (all but the last).
pub const MIN_S3_PART_SIZE_BYTES: u64 = 5 * 1024 * 1024;
/// Limit on one request to the object store (s).
pub const DEFAULT_S3_TIMEOUT_SECS: u64 = 30;

/// Files hold disjoint runs of events, and a file is visible only once
/// complete; it holds only while no other writer uses the sink's prefix.
pub const S3_GUARANTEE: sluice_core::Guarantee =
    sluice_core::Guarantee::ExactlyOnce { condition: Some("at file level; one writer per sink and prefix") };

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3SinkConfig {
    pub id: String,
    #[serde(default = "crate::pipeline::default_required")]
    pub required: bool,
    /// Write to this local folder instead of S3.
    pub local: Option<PathBuf>,
    pub bucket: Option<String>,
    /// Key prefix inside the bucket (or folder inside `local`).
    #[serde(default)]
    pub prefix: String,
    /// Default: `AWS_REGION` / `AWS_DEFAULT_REGION`, else us-east-1.
    pub region: Option<String>,
    /// An S3-compatible server's URL; default: AWS.
    pub endpoint: Option<String>,
    /// Path-style URLs (`endpoint/bucket/key`), which most S3-compatible
    /// servers need.
    #[serde(default)]
    pub path_style: bool,
    /// Default: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN` from the environment.
    #[serde(default)]
    pub access_key_id: Secret,
    #[serde(default)]
    pub secret_access_key: Secret,
    #[serde(default)]
    pub session_token: Secret,
    #[serde(default)]
    pub format: FileFormat,
    /// Parquet: `snappy` (default), `zstd`, `none`. JSON Lines: `none`
    /// (default), `gzip`, `zstd`.
    pub compression: Option<Compression>,
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
    #[serde(default = "default_max_file_events")]
    pub max_file_events: u64,
    #[serde(default = "default_max_file_age_secs")]
    pub max_file_age_secs: u64,
    #[serde(default = "default_part_size_bytes")]
    pub part_size_bytes: u64,
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    #[default]
    Parquet,
    Jsonl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Snappy,
    Zstd,
    Gzip,
}

impl S3SinkConfig {
    /// The compression in effect: the configured one or the format's default.
    pub fn compression(&self) -> Compression {
        self.compression.unwrap_or(match self.format {
            FileFormat::Parquet => Compression::Snappy,
            FileFormat::Jsonl => Compression::None,
        })
    }
}

fn default_max_file_bytes() -> u64 {
    DEFAULT_S3_MAX_FILE_BYTES
}
fn default_max_file_events() -> u64 {
    DEFAULT_S3_MAX_FILE_EVENTS
}
fn default_max_file_age_secs() -> u64 {
    DEFAULT_S3_MAX_FILE_AGE_SECS
}
fn default_part_size_bytes() -> u64 {
    DEFAULT_S3_PART_SIZE_BYTES
}
fn default_timeout_secs() -> u64 {
    DEFAULT_S3_TIMEOUT_SECS
}
