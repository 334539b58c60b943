use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sluice_core::{Event, EventChunks, Guarantee, Op, Position, Sink, SinkError, failpoint};

use super::avro::AvroFile;
use super::jsonl::JsonlFile;
use super::{FileFormat, S3SinkConfig, S3_GUARANTEE};
use super::names;
use super::parquet::ParquetFile;
use super::target::Target;

/// The record of a commit whose outcome was not known, left in the
/// staging folder by versions before claims: the object key and the
/// staged file.
const IN_DOUBT: &str = "commit-in-doubt";

/// One partition: events of one table with commit times on one UTC day.
type PartitionKey = (Arc<str>, i64);

const MICROS_PER_DAY: i64 = 86_400_000_000;

enum Writer {
    Jsonl(Box<JsonlFile>),
    Parquet(Box<ParquetFile>),
    Avro(Box<AvroFile>),
}

/// A Connect schema and the Avro schema made from it.
type AvroSchemas = (Arc<str>, Arc<sluice_format::AvroSchema>);

/// A file being written in the staging folder.
struct OpenFile {
    dir: String,
    staged: PathBuf,
    writer: Writer,
    first: String,
    last: Position,
    events: u64,
    /// The last event the sink took before this file's first: the durable
    /// watermark cannot pass it while this file is open.
    before_first: Option<Position>,
    opened: Instant,
    /// The file claimed already, which this one must be exactly.
    owed: Option<Owed>,
}

/// A file claimed (by this sink before a restart, or by another writer of
/// the prefix) but not in the bucket: whoever meets its first event next
/// writes it, ending exactly at its last, under its name.
struct Owed {
    last: String,
    name: String,
}

/// What the sink knows of a partition's committed files.
struct Committed {
    /// Events up to this sort key are in committed files already: skip
    /// them. `None` once the stream is past it.
    skip_through: Option<String>,
    /// The newest claim, when its file is missing: the first sort key and
    /// the file.
    owed: Option<(String, Owed)>,
}

pub struct ObjectSink {
    config: S3SinkConfig,
    target: Option<Target>,
    staging: PathBuf,
    open: HashMap<PartitionKey, OpenFile>,
    committed: HashMap<PartitionKey, Committed>,
    /// The last event taken (written or found committed already).
    accepted: Option<Position>,
    /// Everything at or below this is in committed files.
    durable: Option<Position>,
    next_file: u64,
    /// The envelope of JSON lines and Avro files.
    encoder: crate::encoded::SharedEncoder,
    /// Avro schemas made so far, by the address of their Connect schema,
    /// which the entry holds so the address is not reused.
    avro_schemas: HashMap<usize, AvroSchemas>,
    /// An event's sort key, compared with the committed and owed files'
    /// lasts: one buffer, not a string per event.
    sort_key: String,
}

impl ObjectSink {
    /// Staged files live in `<local>/.sluice-staging/<sink>` for a local
    /// target (same file system, so a rename commits them), and in
    /// `<data dir>/s3/<pipeline>/<sink>` for S3.
    pub fn new(config: S3SinkConfig, pipeline: &str, data_dir: &Path) -> Self {
        let staging = match &config.local {
            Some(root) => root.join(".sluice-staging").join(&config.id),
            None => data_dir.join("s3").join(pipeline).join(&config.id),
        };
        Self {
            encoder: crate::encoded::SharedEncoder::new(
                &config.format.envelope,
                super::ObjectFormat::CARRIER,
                format!("s3 sink {:?}", config.id),
            ),
            config,
            target: None,
            staging,
            open: HashMap::new(),
            committed: HashMap::new(),
            accepted: None,
            durable: None,
            next_file: 0,
            avro_schemas: HashMap::new(),
            sort_key: String::new(),
        }
    }

    fn extension(&self) -> &'static str {
        use super::Compression::*;
        match (self.config.format.file, self.config.compression()) {
            (FileFormat::Parquet, _) => "parquet",
            (FileFormat::Jsonl, Gzip) => "jsonl.gz",
            (FileFormat::Jsonl, Zstd) => "jsonl.zst",
            (FileFormat::Jsonl, _) => "jsonl",
            (FileFormat::Avro, _) => "avro",
        }
    }

    fn target(&self) -> Result<&Target, SinkError> {
        self.target.as_ref().ok_or_else(|| SinkError::transient("s3 sink is not open"))
    }

    /// Whether `event` is in a committed file already, listing its
    /// partition the first time this process meets it.
    async fn held(&mut self, key: &PartitionKey, event: &Event) -> Result<bool, SinkError> {
        if !self.committed.contains_key(key) {
            let dir = names::partition(&self.config.prefix, &key.0, event.commit_time_us);
            let found = self.committed_in(&dir).await?;
            self.committed.insert(key.clone(), found);
        }
        let Some(committed) = self.committed.get_mut(key) else { return Ok(false) };
        let Some(through) = &committed.skip_through else { return Ok(false) };
        self.sort_key.clear();
        event.position.write_sort_key(&mut self.sort_key);
        if self.sort_key <= *through {
            return Ok(true);
        }
        committed.skip_through = None;
        Ok(false)
    }

    /// What a partition's listing tells: committed files hold every event
    /// up to the highest last among them; the newest claim whose file is
    /// missing is owed.
    ///
    /// Every commit claims its file's first event first, and a writer
    /// starts a file only at the event after the last one it knows is
    /// claimed, so the claims of a partition cover its events one after
    /// another: a writer whose knowledge is behind meets the claim of the
    /// name it wants, and is refused. Only the newest claim can lack its
    /// file: claims follow one another only once a file is committed.
    async fn committed_in(&mut self, dir: &str) -> Result<Committed, SinkError> {
        let sink = &self.config.id;
        let names = self.target()?.names_in(dir).await?;
        let files: Vec<(&str, &str)> = names.iter().filter_map(|name| names::parse(name, sink)).collect();
        let skip_through = files.iter().map(|(_, last)| last.to_string()).max();
        let newest = names.iter().filter_map(|name| names::parse_claim(name, sink)).max();
        let Some(first) = newest.filter(|first| !files.iter().any(|(f, _)| f == first)) else {
            return Ok(Committed { skip_through, owed: None });
        };
        let claim = format!("{dir}/{}", names::claim_name(first, sink));
        let name = self.target()?.read_claim(&claim).await?;
        let Some((_, last)) = names::parse(&name, sink).filter(|(f, _)| f == &first) else {
            return Err(SinkError::permanent(
                format!("s3 sink {sink:?}: the claim {claim} names {name:?}, which is not a file of this sink starting at {first}"),
                "the claim was not written by this sink: remove it, and give every writer of the prefix its own sink id",
            ));
        };
        if !name.ends_with(&format!(".{}", self.extension())) {
            return Err(SinkError::permanent(
                format!("s3 sink {sink:?}: the claim {claim} names {name}, a file of another format than this sink writes; the format changed while that file was in flight"),
                "set the format back until the sink is past that file, or remove the claim to write its events in the new format",
            ));
        }
        let owed = Owed { last: last.to_string(), name };
        Ok(Committed { skip_through, owed: Some((first.to_string(), owed)) })
    }

    /// The Avro schema of the Connect schema `connect`, made once; one
    /// Avro cannot express rejects the event.
    fn avro_schema(&mut self, connect: &Arc<str>, event: &Event) -> Result<AvroSchemas, SinkError> {
        let address = Arc::as_ptr(connect) as *const u8 as usize;
        if let Some(known) = self.avro_schemas.get(&address) {
            return Ok(known.clone());
        }
        let avro = sluice_format::AvroSchema::from_connect(connect).map_err(|e| SinkError::Rejected {
            detail: format!("s3 sink {:?}: {e}", self.config.id),
            position: event.position.clone(),
        })?;
        let known = (connect.clone(), Arc::new(avro));
        self.avro_schemas.insert(address, known.clone());
        Ok(known)
    }

    fn open_file(&mut self, key: &PartitionKey, event: &Event, avro: Option<AvroSchemas>) -> Result<(), SinkError> {
        let owed = match self.committed.get_mut(key).and_then(|c| c.owed.take()) {
            Some((first, owed)) if first == event.position.sort_key() => Some(owed),
            Some((first, owed)) => return Err(self.stream_differs(&owed, &first, &event.position.sort_key())),
            None => None,
        };
        std::fs::create_dir_all(&self.staging).map_err(|e| self.staging_error(&self.staging, e))?;
        self.next_file += 1;
        let staged = self.staging.join(format!("{}.staged", self.next_file));
        let compression = self.config.compression();
        let writer = match self.config.format.file {
            FileFormat::Jsonl => JsonlFile::create(&staged, compression).map(|w| Writer::Jsonl(Box::new(w))),
            FileFormat::Parquet => ParquetFile::create(&staged, compression).map(|f| Writer::Parquet(Box::new(f))),
            FileFormat::Avro => {
                let (connect, schema) = avro.ok_or_else(|| {
                    SinkError::transient(format!("s3 sink {:?}: an Avro file without a schema", self.config.id))
                })?;
                AvroFile::create(&staged, compression, connect, schema).map(|f| Writer::Avro(Box::new(f)))
            }
        }
        .map_err(|e| self.staging_error(&staged, e))?;
        let file = OpenFile {
            dir: names::partition(&self.config.prefix, &key.0, event.commit_time_us),
            staged,
            writer,
            first: event.position.sort_key(),
            last: event.position.clone(),
            events: 0,
            before_first: self.accepted.clone(),
            opened: Instant::now(),
            owed,
        };
        self.open.insert(key.clone(), file);
        Ok(())
    }

    /// The stream does not hold the owed file's events where its claim
    /// says: transforms or the source changed since it was claimed, or
    /// another pipeline writes this prefix with this sink id.
    fn stream_differs(&self, owed: &Owed, expected: &str, met: &str) -> SinkError {
        SinkError::permanent(
            format!(
                "s3 sink {:?}: {} is claimed but not in the bucket, and the stream does not hold its events as the claim says (expected {expected}, met {met})",
                self.config.id, owed.name
            ),
            "the pipeline's source or transforms changed since the file was claimed, or another pipeline writes this prefix with this sink id; give each writer its own prefix or sink id, or remove the claim",
        )
    }

    fn staging_error(&self, path: &Path, e: std::io::Error) -> SinkError {
        SinkError::transient(format!("s3 sink {:?}: staging file {}: {e}", self.config.id, path.display()))
    }

    /// Finishes the partition's open file and makes it visible.
    async fn commit(&mut self, key: &PartitionKey) -> Result<(), SinkError> {
        let Some(file) = self.open.remove(key) else { return Ok(()) };
        let finished = match file.writer {
            Writer::Jsonl(writer) => writer.finish().map_err(|e| self.staging_error(&file.staged, e)),
            Writer::Parquet(writer) => writer.finish(),
            Writer::Avro(writer) => writer.finish().map_err(|e| self.staging_error(&file.staged, e)),
        };
        if let Err(error) = finished {
            let _ = std::fs::remove_file(&file.staged);
            return Err(error);
        }
        let last = file.last.sort_key();
        let name = match &file.owed {
            Some(owed) if owed.last == last => owed.name.clone(),
            Some(owed) => {
                let _ = std::fs::remove_file(&file.staged);
                return Err(self.stream_differs(owed, &owed.last, &last));
            }
            None => names::file_name(&file.first, &last, &self.config.id, self.extension()),
        };
        let key_text = format!("{}/{name}", file.dir);
        // The claim decides which writer commits the file that starts at
        // `first`: one that claimed another file there (in a fleet, a
        // former owner that had not yet seen it lost the pipeline) got
        // there first, and this file must not land.
        let claim = format!("{}/{}", file.dir, names::claim_name(&file.first, &self.config.id));
        let holder = self.target()?.claim(&claim, &name).await?;
        if holder != name {
            let _ = std::fs::remove_file(&file.staged);
            return Err(SinkError::transient(format!(
                "s3 sink {:?}: another writer claimed {claim} first, for {holder} (this sink's file was {name}); the sink lists the partition again and goes on from there",
                self.config.id
            )));
        }
        failpoint::hit("s3.after_claim");
        // A request cut short (a timeout, a kill -9) may still land later;
        // it holds the claimed events, as any later attempt does.
        self.target()?.commit(&file.staged, &key_text, &self.staging).await?;
        failpoint::hit("s3.after_commit");
        tracing::debug!(file = %key_text, events = file.events, "committed a file");
        self.durable = self.watermark();
        Ok(())
    }

    /// The durable watermark: the last event taken, or, while files are
    /// open, the last one taken before the oldest open file began.
    fn watermark(&self) -> Option<Position> {
        match self.open.values().map(|f| &f.before_first).min() {
            Some(before) => before.clone(),
            None => self.accepted.clone(),
        }
    }

    /// Commits again the file whose commit was in doubt, under its key
    /// (a record left by a version before claims).
    async fn settle_in_doubt(&mut self) -> Result<(), SinkError> {
        let record = self.staging.join(IN_DOUBT);
        let Ok(text) = std::fs::read_to_string(&record) else { return Ok(()) };
        if let Some((key, staged)) = text.split_once('\n') {
            let staged = self.staging.join(staged);
            // Without the staged file the commit happened (a local rename).
            if !staged.as_os_str().is_empty() && staged.is_file() {
                tracing::info!(file = key, "committing again a file whose commit was in doubt");
                self.target()?.commit(&staged, key, &self.staging).await?;
            }
        }
        let _ = std::fs::remove_file(&record);
        Ok(())
    }

    /// Takes an event no file needs (committed already, or nothing to
    /// write).
    fn pass_over(&mut self, event: &Event) {
        self.accepted = Some(event.position.clone());
        if self.open.is_empty() {
            self.durable = self.accepted.clone();
        }
    }

    fn discard_open_files(&mut self) {
        for (_, file) in self.open.drain() {
            drop(file.writer);
            let _ = std::fs::remove_file(&file.staged);
        }
    }
}

fn too_big(file: &OpenFile, config: &S3SinkConfig) -> bool {
    let bytes = match &file.writer {
        Writer::Jsonl(w) => w.bytes(),
        Writer::Parquet(w) => w.bytes(),
        Writer::Avro(w) => w.bytes(),
    };
    bytes >= config.max_file_bytes || file.events >= config.max_file_events
}

#[async_trait]
impl Sink for ObjectSink {
    /// A HEAD of a key under the prefix: the bucket answers and takes the
    /// credentials. Writing is not tried, so nothing lands in the bucket.
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        let target = match Target::new(&self.config) {
            Ok(target) => target,
            Err(e) => return vec![crate::preflight::outcome("bucket", Err::<(), _>(e), "", "check the sink's config")],
        };
        let reached = target.check_access(&self.config.prefix).await;
        vec![crate::preflight::outcome(
            "bucket",
            reached,
            "answered and took the credentials (a HEAD under the prefix; writes are not tried)",
            "check bucket, endpoint, region and the credentials",
        )]
    }

    fn id(&self) -> &str {
        &self.config.id
    }

    fn guarantee(&self) -> Guarantee {
        S3_GUARANTEE
    }

    /// Drops what was staged and not committed, aborts an upload a crash
    /// left unfinished, and forgets what it knew of committed files, so
    /// each partition is listed again. Reports what it knows is committed;
    /// after a restart that is nothing, and the events the coordinator
    /// replays that committed files hold already are skipped per partition.
    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        self.discard_open_files();
        self.committed.clear();
        if self.target.is_none() {
            self.target = Some(Target::new(&self.config)?);
        }
        self.target()?.check_access(&self.config.prefix).await?;
        self.target()?.abort_leftover(&self.staging).await?;
        self.settle_in_doubt().await?;
        match std::fs::read_dir(&self.staging) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    if entry.file_name().to_string_lossy().ends_with(".staged") {
                        let _ = std::fs::remove_file(entry.path());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.staging_error(&self.staging, e)),
        }
        self.accepted = self.durable.clone();
        Ok(self.durable.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let shared = events.shared();
        while let Some(chunk) = events.next_chunk().await? {
            let encoding = match self.config.format.file {
                FileFormat::Jsonl | FileFormat::Avro => Some(self.encoder.chunk(shared.as_ref(), chunk).await),
                FileFormat::Parquet => None,
            };
            for (at, event) in chunk.iter().enumerate() {
                let table = event.route.as_ref().unwrap_or(&event.table);
                let key: PartitionKey = (Arc::clone(table), event.commit_time_us.div_euclid(MICROS_PER_DAY));
                // A Parquet file holds one table's rows; a schema change
                // is not one, and the next row begins a file of its own.
                let not_a_row = self.config.format.file == FileFormat::Parquet && event.op == Op::Schema;
                if not_a_row || self.held(&key, event).await? {
                    self.pass_over(event);
                    continue;
                }
                let records = match &encoding {
                    Some(encoding) => encoding.records(&self.encoder, at, event)?,
                    None => &[],
                };
                let avro = match self.config.format.file {
                    FileFormat::Avro => match records.iter().find_map(|r| r.value_schema.as_ref()) {
                        Some(connect) => Some(self.avro_schema(connect, event)?),
                        // The format leaves the event out (a skipped truncate).
                        None => {
                            self.pass_over(event);
                            continue;
                        }
                    },
                    _ => None,
                };
                let fits = match self.open.get(&key).map(|f| &f.writer) {
                    None => None,
                    Some(Writer::Parquet(writer)) => Some(writer.accepts(event)),
                    Some(Writer::Avro(writer)) => Some(avro.as_ref().is_some_and(|(connect, _)| writer.holds(connect))),
                    Some(Writer::Jsonl(_)) => Some(true),
                };
                match fits {
                    None => self.open_file(&key, event, avro)?,
                    // Another schema: the file ends here, a new one begins.
                    Some(false) => {
                        self.commit(&key).await?;
                        self.open_file(&key, event, avro)?;
                    }
                    Some(true) => {}
                }
                let Some(file) = self.open.get_mut(&key) else { continue };
                match &mut file.writer {
                    Writer::Jsonl(writer) => {
                        for record in records {
                            writer.push(record.value.as_deref().unwrap_or_default())?;
                        }
                    }
                    Writer::Avro(writer) => {
                        for record in records {
                            writer.push(record)?;
                        }
                    }
                    Writer::Parquet(writer) => writer.push(event)?,
                }
                file.last = event.position.clone();
                file.events += 1;
                self.accepted = Some(event.position.clone());
                // An owed file ends at its last (or past it, which its
                // commit refuses), whatever its size.
                let due = match &file.owed {
                    Some(owed) => {
                        self.sort_key.clear();
                        event.position.write_sort_key(&mut self.sort_key);
                        self.sort_key >= owed.last
                    }
                    None => too_big(file, &self.config),
                };
                if due {
                    self.commit(&key).await?;
                }
            }
        }
        // Past the last event where the pipeline's transforms dropped the
        // write's later events, or all of them: accepted all the same, so
        // the watermark reaches the write's end once the open files commit.
        let end = events.last_position();
        if self.accepted.as_ref().is_none_or(|accepted| accepted < end) {
            self.accepted = Some(end.clone());
        }
        let max_age = Duration::from_secs(self.config.max_file_age_secs);
        let aged: Vec<PartitionKey> = self
            .open
            .iter()
            .filter(|(_, f)| f.owed.is_none() && f.opened.elapsed() >= max_age)
            .map(|(k, _)| k.clone())
            .collect();
        for key in aged {
            self.commit(&key).await?;
        }
        self.durable = self.watermark();
        Ok(self.durable.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        // Oldest first, so the watermark moves with each commit. An owed
        // file waits for its last event: the watermark stays before it.
        let mut keys: Vec<(Option<Position>, PartitionKey)> = self
            .open
            .iter()
            .filter(|(_, f)| f.owed.is_none())
            .map(|(k, f)| (f.before_first.clone(), k.clone()))
            .collect();
        keys.sort();
        for (_, key) in keys {
            self.commit(&key).await?;
        }
        self.durable = self.watermark();
        Ok(self.durable.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.discard_open_files();
        Ok(())
    }

    fn flush_due(&self) -> Option<std::time::Instant> {
        let max_age = Duration::from_secs(self.config.max_file_age_secs);
        self.open.values().filter(|f| f.owed.is_none()).map(|f| f.opened + max_age).min()
    }
}
