//! The `s3` (object storage) sink's config.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sluice_core::Guarantee;
use sluice_core::settings::{Invalid, check_range, check_seconds};

use sluice_core::settings::Secret;

use crate::registry::SinkSettings;
use crate::target::{Target, prefix_parts, server};

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
/// Each part is read into memory to be sent: at 16 MiB, peak RSS of a
/// drain into S3 was 12 to 20 MB higher (docs/benchmarks.md).
pub const DEFAULT_S3_PART_SIZE_BYTES: u64 = 8 * 1024 * 1024;
/// S3's smallest part (all but the last).
pub const MIN_S3_PART_SIZE_BYTES: u64 = 5 * 1024 * 1024;
/// Limit on one request to the object store (s).
pub const DEFAULT_S3_TIMEOUT_SECS: u64 = 30;

/// Files hold disjoint runs of events, and a file is visible only once
/// complete; it holds only while no other writer uses the sink's prefix.
pub const S3_GUARANTEE: sluice_core::Guarantee =
    sluice_core::Guarantee::ExactlyOnce { condition: Some("at file level; one pipeline per sink and prefix") };

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3SinkConfig {
    pub id: String,
    #[serde(default = "crate::registry::default_required")]
    pub required: bool,
    /// This sink's buffer limits (`buffer.max_memory_bytes`, `buffer.max_disk_bytes`).
    #[serde(default)]
    pub buffer: crate::BufferConfig,
    /// `at_least_once` (default) or `at_most_once` (optional sinks only).
    #[serde(default)]
    pub delivery: crate::Delivery,
    /// This sink's own transforms, run in its writer after the pipeline's.
    #[serde(default)]
    pub transforms: Vec<sluice_transform::TransformConfig>,
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
    /// `parquet`, `jsonl` or `avro`, or a block that also names the
    /// envelope: `{ file: jsonl, envelope: debezium, ... }`.
    #[serde(default)]
    pub format: ObjectFormat,
    /// Parquet: `snappy` (default), `zstd`, `none`. JSON Lines: `none`
    /// (default), `gzip`, `zstd`. Avro: `snappy` (default), `deflate`,
    /// `zstd`, `none`.
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
    /// Avro object container files of Debezium's change events.
    Avro,
}

/// The files' format, and the envelope each JSON line is written in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectFormat {
    pub file: FileFormat,
    pub envelope: sluice_format::FormatConfig,
}

impl ObjectFormat {
    /// Lines have neither keys nor headers.
    pub const CARRIER: sluice_format::Carrier = sluice_format::Carrier { name: "s3", keys: false, headers: sluice_format::Headers::None, avro: if cfg!(feature = "s3") { sluice_format::AvroSupport::Files } else { sluice_format::AvroSupport::None } };
}

/// `parquet`, `jsonl`, `avro`, or `{ file, envelope, <envelope options> }`.
/// Avro files hold Debezium's events, whose Connect schemas become the
/// files' schemas, so `avro` implies `envelope: debezium, encoding: avro`.
impl<'de> Deserialize<'de> for ObjectFormat {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        use serde_json::Value;
        let file = |value: Value| FileFormat::deserialize(value).map_err(D::Error::custom);
        let mut block = match Value::deserialize(deserializer)? {
            text @ Value::String(_) => {
                let mut block = serde_json::Map::new();
                block.insert("file".into(), text);
                block
            }
            Value::Object(block) => block,
            other => {
                return Err(D::Error::custom(format!(
                    "expected `parquet`, `jsonl`, `avro` or a block {{ file: jsonl, envelope: ... }}, found {other}"
                )));
            }
        };
        let file = block.remove("file").map(file).transpose()?.unwrap_or(FileFormat::Jsonl);
        if file == FileFormat::Avro {
            block.entry("envelope").or_insert_with(|| "debezium".into());
            block.entry("encoding").or_insert_with(|| "avro".into());
        }
        let envelope = sluice_format::FormatConfig::deserialize(Value::Object(block)).map_err(D::Error::custom)?;
        Ok(Self { file, envelope })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Snappy,
    Zstd,
    Gzip,
    Deflate,
}

impl S3SinkConfig {
    /// The compression in effect: the configured one or the format's default.
    pub fn compression(&self) -> Compression {
        self.compression.unwrap_or(match self.format.file {
            FileFormat::Parquet | FileFormat::Avro => Compression::Snappy,
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

impl SinkSettings for S3SinkConfig {
    fn guarantee(&self) -> Guarantee {
        S3_GUARANTEE
    }

    fn validate(&self, at: &str) -> Result<(), Invalid> {
        let c = self;
        check_place(at, c)?;
        if c.prefix.starts_with('/') || c.prefix.split('/').any(|part| part == ".." || part == ".") {
            return Err(Invalid::new(
                format!("{at}.prefix"),
                format!("{:?} is not a plain relative key prefix", c.prefix),
                "write folders separated by '/', without a leading '/', '.' or '..'",
            ));
        }
        c.format.envelope.validate(at, ObjectFormat::CARRIER)?;
        if c.format.file == FileFormat::Parquet && c.format.envelope.envelope != sluice_format::Envelope::Native {
            return Err(Invalid::new(
                format!("{at}.format.envelope"),
                "Parquet files hold the native event's columns, not another envelope",
                "set format.file: jsonl, or remove envelope",
            ));
        }
        if c.format.file == FileFormat::Avro && !c.format.envelope.is_avro() {
            return Err(Invalid::new(
                format!("{at}.format.encoding"),
                "Avro files hold Avro datums",
                "remove encoding, or set format.file: jsonl for JSON",
            ));
        }
        if c.format.file != FileFormat::Avro && c.format.envelope.is_avro() {
            return Err(Invalid::new(
                format!("{at}.format.encoding"),
                format!("{:?} files cannot hold Avro datums", c.format.file),
                "set format.file: avro for Avro container files",
            ));
        }
        let allowed: &[Compression] = match c.format.file {
            FileFormat::Parquet => &[Compression::None, Compression::Snappy, Compression::Zstd],
            FileFormat::Jsonl => &[Compression::None, Compression::Gzip, Compression::Zstd],
            FileFormat::Avro => &[Compression::None, Compression::Deflate, Compression::Snappy, Compression::Zstd],
        };
        if !allowed.contains(&c.compression()) {
            return Err(Invalid::new(
                format!("{at}.compression"),
                format!("{:?} does not apply to {:?} files", c.compression(), c.format.file),
                "parquet takes none, snappy or zstd; jsonl takes none, gzip or zstd; avro takes none, deflate, snappy or zstd",
            ));
        }
        // S3 objects end at 5 TiB.
        check_range(at, "max_file_bytes", c.max_file_bytes, 1024 * 1024, 5 << 40, "bytes (1 MiB to 5 TiB)")?;
        check_range(at, "max_file_events", c.max_file_events, 1, 1_000_000_000_000, "events")?;
        if !(MIN_S3_PART_SIZE_BYTES..=5 * 1024 * 1024 * 1024).contains(&c.part_size_bytes) {
            return Err(Invalid::new(
                format!("{at}.part_size_bytes"),
                format!("{} is outside S3's part sizes", c.part_size_bytes),
                "set part_size_bytes between 5242880 (5 MiB) and 5368709120 (5 GiB)",
            ));
        }
        check_seconds(at, "max_file_age_secs", c.max_file_age_secs, 86_400)?;
        check_seconds(at, "timeout_secs", c.timeout_secs, 3600)
    }

    fn target(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> Option<Target> {
        Some(match (&self.local, &self.bucket) {
            (Some(folder), _) => Target::Folder { folder: resolve(folder), prefix: prefix_parts(&self.prefix) },
            (None, Some(bucket)) => Target::Bucket {
                endpoint: self.endpoint.as_deref().map_or_else(|| "AWS".to_string(), |e| server(e, 443)),
                bucket: bucket.clone(),
                prefix: prefix_parts(&self.prefix),
            },
            (None, None) => return None,
        })
    }

    fn preflight(&self) -> Result<(), (&'static str, String)> {
        match &self.local {
            Some(folder) => {
                let target = folder.join(self.prefix.trim_start_matches('/'));
                crate::file::writable_folder(&target, &target).map_err(|problem| ("local", problem))
            }
            None => Ok(()),
        }
    }
}

/// Where the files go: exactly one of a bucket and a local folder, and
/// no S3 setting beside a local folder.
fn check_place(at: &str, c: &S3SinkConfig) -> Result<(), Invalid> {
    match (&c.local, &c.bucket) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(Invalid::new(
                format!("{at}.bucket"),
                "set exactly one of bucket (S3) and local (a folder)",
                "write bucket: <name> for S3, or local: <folder> for local disk",
            ));
        }
        (Some(local), None) if local.as_os_str().is_empty() => {
            return Err(Invalid::new(format!("{at}.local"), "the path is empty", "set local to a folder"));
        }
        (None, Some(bucket)) => {
            let valid = (3..=63).contains(&bucket.len())
                && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
            if !valid {
                return Err(Invalid::new(
                    format!("{at}.bucket"),
                    format!("{bucket:?} is not a valid bucket name"),
                    "use 3 to 63 characters: a-z, 0-9, '-' and '.'",
                ));
            }
        }
        _ => {}
    }
    if c.local.is_some() {
        for (field, set) in [
            ("endpoint", c.endpoint.is_some()),
            ("region", c.region.is_some()),
            ("access_key_id", !c.access_key_id.expose().is_empty()),
            ("secret_access_key", !c.secret_access_key.expose().is_empty()),
        ] {
            if set {
                return Err(Invalid::new(
                    format!("{at}.{field}"),
                    "is an S3 setting, but local is set",
                    format!("remove {field}, or write to S3 with bucket instead of local"),
                ));
            }
        }
    }
    if let Some(endpoint) = &c.endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        return Err(Invalid::new(
            format!("{at}.endpoint"),
            format!("{endpoint:?} is not an http:// or https:// URL"),
            "write http(s)://host[:port]",
        ));
    }
    Ok(())
}
