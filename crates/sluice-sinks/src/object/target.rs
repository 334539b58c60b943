//! Where committed files go: a local folder (rename into place) or an S3
//! bucket (one PUT, or a multipart upload whose id is recorded so a crash
//! leaves no upload behind), and the claims that say which writer may
//! commit which file: created only if absent (`If-None-Match: *` on S3,
//! `O_EXCL` on disk).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as Key;
use object_store::{ClientOptions, ObjectStore, PutMode, PutOptions, PutPayload, RetryConfig};
use sluice_core::{SinkError, failpoint};

use super::{DEFAULT_S3_REGION, S3SinkConfig};

/// The record of a multipart upload in flight, in the staging folder.
const UPLOAD_MARKER: &str = "upload-in-flight";

pub(super) enum Target {
    Local { root: PathBuf },
    S3 { store: Arc<AmazonS3>, bucket: String, endpoint: String, part_bytes: u64 },
}

impl Target {
    pub fn new(config: &S3SinkConfig) -> Result<Self, SinkError> {
        if let Some(root) = &config.local {
            return Ok(Target::Local { root: root.clone() });
        }
        let bucket = config.bucket.clone().unwrap_or_default();
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&bucket);
        let region = config
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .unwrap_or_else(|| DEFAULT_S3_REGION.to_string());
        builder = builder.with_region(region);
        let profile = Self::profile_keys(config)?;
        let keys = match &profile {
            Some(p) => [&p.access_key_id, &p.secret_access_key, &p.session_token],
            None => [&config.access_key_id, &config.secret_access_key, &config.session_token],
        };
        for (value, set) in [
            (keys[0].expose(), AmazonS3Builder::with_access_key_id as fn(_, _) -> _),
            (keys[1].expose(), AmazonS3Builder::with_secret_access_key),
            (keys[2].expose(), AmazonS3Builder::with_token),
        ] {
            if !value.is_empty() {
                builder = set(builder, value);
            }
        }
        let endpoint = config.endpoint.clone().unwrap_or_else(|| "AWS S3".to_string());
        let timeout = Duration::from_secs(config.timeout_secs);
        let mut client = ClientOptions::new().with_timeout(timeout).with_connect_timeout(timeout);
        if let Some(url) = &config.endpoint {
            builder = builder.with_endpoint(url);
            client = client.with_allow_http(url.starts_with("http://"));
        }
        builder = builder
            .with_virtual_hosted_style_request(!config.path_style)
            .with_client_options(client)
            // The coordinator retries a failed write as a whole; keep the
            // client's own retries within one call's deadline.
            .with_retry(RetryConfig { max_retries: 2, retry_timeout: timeout, ..RetryConfig::default() });
        let store = builder.build().map_err(|e| {
            SinkError::permanent(
                format!("s3 sink {:?}: {e}", config.id),
                "check bucket, region, endpoint and the credentials (or AWS_* environment variables)",
            )
        })?;
        Ok(Target::S3 { store: Arc::new(store), bucket, endpoint, part_bytes: config.part_size_bytes })
    }

    /// Keys from the shared credentials file, used only where nothing
    /// earlier in the chain gives any: the config's keys, then the
    /// `AWS_ACCESS_KEY_ID` variables, come first; web identity, container
    /// credentials and instance metadata (which the client finds itself)
    /// come after.
    fn profile_keys(config: &S3SinkConfig) -> Result<Option<super::profile::ProfileKeys>, SinkError> {
        let configured = !config.access_key_id.expose().is_empty();
        let in_env = std::env::var("AWS_ACCESS_KEY_ID").is_ok_and(|v| !v.is_empty());
        let Some(source) = super::profile::ProfileSource::from_env().filter(|_| !configured && !in_env) else {
            return Ok(None);
        };
        source.keys().map_err(|problem| {
            SinkError::permanent(
                format!("s3 sink {:?}: {problem}", config.id),
                "fix AWS_PROFILE or AWS_SHARED_CREDENTIALS_FILE, or set access_key_id and secret_access_key",
            )
        })
    }

    /// The names of the objects in folder `dir` (a partition).
    pub async fn names_in(&self, dir: &str) -> Result<Vec<String>, SinkError> {
        match self {
            Target::Local { root } => {
                let folder = root.join(dir);
                match std::fs::read_dir(&folder) {
                    Ok(entries) => {
                        Ok(entries.filter_map(|entry| entry.ok()?.file_name().into_string().ok()).collect())
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                    Err(e) => Err(SinkError::transient(format!("s3 sink: cannot list {}: {e}", folder.display()))),
                }
            }
            Target::S3 { store, .. } => {
                let prefix = self.key(dir)?;
                let listing =
                    store.list_with_delimiter(Some(&prefix)).await.map_err(|e| self.error("listing", dir, e))?;
                Ok(listing.objects.iter().filter_map(|o| o.location.filename().map(str::to_string)).collect())
            }
        }
    }

    /// Creates the claim `key` holding `body` if no claim of that name
    /// exists; either way, answers the body the claim holds.
    pub async fn claim(&self, key: &str, body: &str) -> Result<String, SinkError> {
        match self {
            Target::Local { root } => {
                let path = root.join(key);
                let io = |what: &str, e: std::io::Error| {
                    SinkError::transient(format!("s3 sink: {what} {}: {e}", path.display()))
                };
                let folder = path.parent().unwrap_or(root);
                std::fs::create_dir_all(folder).map_err(|e| io("cannot create the folder of", e))?;
                // Written whole beside it, then linked: link(2) refuses
                // an existing name, so a claim appears whole or not at all.
                let draft = folder.join(format!(".{}.draft", path.file_name().unwrap_or_default().to_string_lossy()));
                let mut file = std::fs::File::create(&draft).map_err(|e| io("cannot write the claim", e))?;
                std::io::Write::write_all(&mut file, body.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| io("cannot write the claim", e))?;
                let linked = std::fs::hard_link(&draft, &path);
                let _ = std::fs::remove_file(&draft);
                match linked {
                    Ok(()) => {
                        std::fs::File::open(folder)
                            .and_then(|f| f.sync_all())
                            .map_err(|e| io("cannot sync the folder of", e))?;
                        Ok(body.to_string())
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => self.read_claim(key).await,
                    Err(e) => Err(io("cannot create the claim", e)),
                }
            }
            Target::S3 { store, .. } => {
                let location = self.key(key)?;
                // Create-only (If-None-Match: *): of two writers claiming
                // one name, the second is refused and reads the first's.
                let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
                match store.put_opts(&location, PutPayload::from(body.to_string()), options).await {
                    Ok(_) => Ok(body.to_string()),
                    Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                        self.read_claim(key).await
                    }
                    Err(e) => Err(self.error("claiming", key, e)),
                }
            }
        }
    }

    /// The body of the claim `key`.
    pub async fn read_claim(&self, key: &str) -> Result<String, SinkError> {
        match self {
            Target::Local { root } => std::fs::read_to_string(root.join(key))
                .map_err(|e| SinkError::transient(format!("s3 sink: cannot read the claim {key}: {e}"))),
            Target::S3 { store, .. } => {
                let location = self.key(key)?;
                let held = store.get(&location).await.map_err(|e| self.error("reading the claim", key, e))?;
                let bytes = held.bytes().await.map_err(|e| self.error("reading the claim", key, e))?;
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        }
    }

    /// Makes the finished file `staged` visible as `key`: after this
    /// returns, a kill -9 cannot take it back.
    pub async fn commit(&self, staged: &Path, key: &str, staging: &Path) -> Result<(), SinkError> {
        match self {
            Target::Local { root } => {
                let target = root.join(key);
                let folder = target.parent().unwrap_or(root);
                let io = |what: &str, e: std::io::Error| {
                    SinkError::transient(format!("s3 sink: {what} {}: {e}", target.display()))
                };
                std::fs::create_dir_all(folder).map_err(|e| io("cannot create the folder of", e))?;
                std::fs::rename(staged, &target).map_err(|e| io("cannot move the finished file to", e))?;
                // The rename is durable once the folder is synced.
                std::fs::File::open(folder).and_then(|f| f.sync_all()).map_err(|e| io("cannot sync the folder of", e))
            }
            Target::S3 { store, part_bytes, .. } => {
                let size = std::fs::metadata(staged)
                    .map_err(|e| SinkError::transient(format!("s3 sink: staged file {}: {e}", staged.display())))?
                    .len();
                let part_bytes = part_size(*part_bytes, size);
                let location = self.key(key)?;
                if size <= part_bytes {
                    // Overwriting is safe: only holders of the file's claim
                    // write it, and every holder writes the same events.
                    let body = read_part(staged, 0, size)?;
                    store.put(&location, body).await.map_err(|e| self.error("uploading", key, e))?;
                } else {
                    let id = store.create_multipart(&location).await.map_err(|e| self.error("starting", key, e))?;
                    record_upload(staging, key, &id)?;
                    let mut parts: Vec<PartId> = Vec::new();
                    let mut offset = 0;
                    while offset < size {
                        let length = part_bytes.min(size - offset);
                        let body = read_part(staged, offset, length)?;
                        let part = store
                            .put_part(&location, &id, parts.len(), body)
                            .await
                            .map_err(|e| self.error("uploading a part of", key, e))?;
                        parts.push(part);
                        offset += length;
                        failpoint::hit("s3.after_part");
                    }
                    store
                        .complete_multipart(&location, &id, parts)
                        .await
                        .map_err(|e| self.error("completing", key, e))?;
                    let _ = std::fs::remove_file(staging.join(UPLOAD_MARKER));
                }
                let _ = std::fs::remove_file(staged);
                Ok(())
            }
        }
    }

    /// Asks the server for one object under `prefix`, so that refused
    /// credentials stop the sink with a hint at once. The sink's first
    /// real request is a listing, and object_store reports a refused
    /// listing as `Generic` (its status-carrying error type is private),
    /// which cannot be told from a passing outage; a HEAD is reported by
    /// status: `PermissionDenied` for 403, `Unauthenticated` for 401.
    pub async fn check_access(&self, prefix: &str) -> Result<(), SinkError> {
        let Target::S3 { store, .. } = self else { return Ok(()) };
        let prefix = prefix.trim_end_matches('/');
        let probe = if prefix.is_empty() {
            ".sluice-access-check".to_string()
        } else {
            format!("{prefix}/.sluice-access-check")
        };
        let location = self.key(&probe)?;
        match store.head(&location).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("checking access with a HEAD of", &probe, e)),
        }
    }

    /// Aborts the multipart upload a crash left in flight, if any.
    pub async fn abort_leftover(&self, staging: &Path) -> Result<(), SinkError> {
        let Target::S3 { store, .. } = self else { return Ok(()) };
        let marker = staging.join(UPLOAD_MARKER);
        let Ok(text) = std::fs::read_to_string(&marker) else { return Ok(()) };
        if let Some((key, id)) = text.split_once('\n') {
            let location = self.key(key)?;
            match store.abort_multipart(&location, &id.trim().to_string()).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.error("aborting the unfinished upload of", key, e)),
            }
        }
        let _ = std::fs::remove_file(&marker);
        Ok(())
    }

    fn key(&self, key: &str) -> Result<Key, SinkError> {
        Key::parse(key).map_err(|e| {
            SinkError::permanent(format!("s3 sink: {key:?} is not a valid object key: {e}"), "change prefix")
        })
    }

    fn error(&self, what: &str, key: &str, e: object_store::Error) -> SinkError {
        let (bucket, endpoint) = match self {
            Target::S3 { bucket, endpoint, .. } => (bucket.as_str(), endpoint.as_str()),
            Target::Local { .. } => ("", ""),
        };
        let mut detail = format!("s3 sink: {what} s3://{bucket}/{key} at {endpoint}: {e}");
        // The root cause (a refused connection, a TLS failure) sits at the
        // end of the chain, and the top-level text often leaves it out.
        let mut cause = std::error::Error::source(&e);
        while let Some(inner) = cause {
            let text = inner.to_string();
            if !detail.contains(&text) {
                detail.push_str(": ");
                detail.push_str(&text);
            }
            cause = inner.source();
        }
        classify(&e, detail)
    }
}

/// The sink's error table: which object_store errors retrying can fix.
fn classify(e: &object_store::Error, detail: String) -> SinkError {
    match e {
        object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. } => SinkError::permanent(
            detail,
            "another writer created this file: two pipelines (or sinks) write the same prefix; give each its own",
        ),
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            SinkError::permanent(
                detail,
                "the server refused the credentials or the request (HTTP 401/403); retrying cannot fix that: check access_key_id and secret_access_key (or the AWS_* environment variables), the region, and the bucket policy",
            )
        }
        object_store::Error::NotFound { .. } => {
            SinkError::permanent(detail, "check that the bucket exists and the endpoint is right")
        }
        _ => SinkError::transient(detail),
    }
}

/// S3 takes at most this many parts in one upload.
const MAX_PARTS: u64 = 10_000;

/// The configured part size, or the smallest that fits a file of `size`
/// in S3's 10,000 parts: `max_file_bytes` may allow files larger than
/// 10,000 parts of `part_size_bytes`, and a file is cut only after it
/// passes that size.
fn part_size(configured: u64, size: u64) -> u64 {
    configured.max(size.div_ceil(MAX_PARTS))
}

fn read_part(path: &Path, offset: u64, length: u64) -> Result<PutPayload, SinkError> {
    let io = |e: std::io::Error| SinkError::transient(format!("s3 sink: reading staged file {}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(io)?;
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buffer = Vec::with_capacity(length as usize);
    file.take(length).read_to_end(&mut buffer).map_err(io)?;
    Ok(PutPayload::from(buffer))
}

/// Records the upload durably before any part is sent, so a restart can
/// abort it.
fn record_upload(staging: &Path, key: &str, id: &str) -> Result<(), SinkError> {
    let marker = staging.join(UPLOAD_MARKER);
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&marker)?;
        std::io::Write::write_all(&mut file, format!("{key}\n{id}").as_bytes())?;
        file.sync_all()
    };
    write().map_err(|e| SinkError::transient(format!("s3 sink: cannot record the upload in {}: {e}", marker.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Box<dyn std::error::Error + Send + Sync> {
        "refused".into()
    }

    #[test]
    fn a_file_past_ten_thousand_parts_goes_up_in_larger_ones() {
        let part = 8 << 20;
        assert_eq!(part_size(part, 3 << 30), part);
        assert_eq!(part_size(part, MAX_PARTS * part), part);
        let size = MAX_PARTS * part + 1;
        let larger = part_size(part, size);
        assert!(larger > part && size.div_ceil(larger) <= MAX_PARTS, "{larger}");
        assert!(5u64 << 40 <= MAX_PARTS * part_size(part, 5 << 40));
    }

    #[test]
    fn refused_credentials_are_permanent_with_a_hint() {
        let path = "k".to_string();
        for e in [
            object_store::Error::PermissionDenied { path: path.clone(), source: source() },
            object_store::Error::Unauthenticated { path: path.clone(), source: source() },
        ] {
            match classify(&e, "x".into()) {
                SinkError::Permanent { hint, .. } => assert!(hint.contains("secret_access_key"), "{hint}"),
                other => panic!("{e} is retried: {other}"),
            }
        }
        let outage = object_store::Error::Generic { store: "S3", source: source() };
        assert!(classify(&outage, "x".into()).is_transient());
        let taken = object_store::Error::AlreadyExists { path, source: source() };
        assert!(!classify(&taken, "x".into()).is_transient());
    }
}
