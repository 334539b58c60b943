use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use sluice_core::{Event, EventChunks, Guarantee, Position, Sink, SinkError};
use sluice_format::Record;

use crate::encoded::SharedEncoder;

use super::RedisSinkConfig;
use crate::registry::SinkSettings;
use crate::template::{Template, default_key};

/// KEYS[1] = checkpoint key, KEYS[2..] = streams. ARGV[1] = new checkpoint
/// (`sortkey|position`), ARGV[2] = MAXLEN or "", ARGV[3] = entry count,
/// then per entry: sort key, stream index (into KEYS), id, key, op, payload.
/// The entries of one event share its sort key, so the script appends all
/// of them or none.
const APPEND: &str = r#"
local stored = redis.call('GET', KEYS[1])
local stored_sort = ''
if stored then stored_sort = string.match(stored, '^([^|]*)') or '' end
local maxlen = ARGV[2]
local n = tonumber(ARGV[3])
local appended = 0
local i = 4
for e = 1, n do
  local sort = ARGV[i]
  if sort > stored_sort then
    local stream = KEYS[tonumber(ARGV[i + 1])]
    if maxlen ~= '' then
      redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'id', ARGV[i + 2], 'key', ARGV[i + 3], 'op', ARGV[i + 4], 'payload', ARGV[i + 5])
    else
      redis.call('XADD', stream, '*', 'id', ARGV[i + 2], 'key', ARGV[i + 3], 'op', ARGV[i + 4], 'payload', ARGV[i + 5])
    end
    appended = appended + 1
  end
  i = i + 6
end
local new_sort = string.match(ARGV[1], '^([^|]*)')
if new_sort > stored_sort then redis.call('SET', KEYS[1], ARGV[1]) end
return appended
"#;

pub struct RedisSink {
    config: RedisSinkConfig,
    checkpoint_key: String,
    stream: Template,
    timeout: Duration,
    script: redis::Script,
    conn: Option<MultiplexedConnection>,
    held: Option<Position>,
    encoder: SharedEncoder,
}

/// One stream entry's fields, as the script and XADD take them; the key
/// and payload borrowed from the encoded records where they are there.
struct Entry<'a> {
    id: String,
    key: Cow<'a, [u8]>,
    payload: &'a [u8],
}

/// The entries of `event`: one per record of its format (none for an
/// event the format leaves out). The `key` field is the format's key where
/// it defines one (Debezium), else the primary key as JSON.
fn entries<'a>(event: &Event, records: &'a [Record], own_keys: bool, out: &mut Vec<Entry<'a>>) {
    let event_id = event.id().to_string();
    for (index, record) in records.iter().enumerate() {
        let key = match (&event.key, record.key.as_deref()) {
            (Some(row), _) if own_keys => {
                let mut key = Vec::new();
                default_key(row, &mut key);
                Cow::Owned(key)
            }
            (_, key) => Cow::Borrowed(key.unwrap_or_default()),
        };
        let id = crate::encoded::record_id(&event_id, records, index).into_owned();
        out.push(Entry { id, key, payload: record.value.as_deref().unwrap_or_default() });
    }
}

impl RedisSink {
    /// The CA and client certificate of a `rediss://` url, read at each
    /// open so a renewed certificate is picked up on the next reconnect.
    fn tls_certificates(&self) -> Result<redis::TlsCertificates, SinkError> {
        let read = |field: &str, path: &std::path::Path| {
            std::fs::read(path).map_err(|e| {
                SinkError::permanent(
                    format!("redis sink {:?}: cannot read {field} {}: {e}", self.config.id, path.display()),
                    format!("check `{field}`"),
                )
            })
        };
        let root_cert = self.config.ca_file.as_deref().map(|p| read("ca_file", p)).transpose()?;
        let client_tls = match (&self.config.cert_file, &self.config.key_file) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("cert_file", cert)?,
                client_key: read("key_file", key)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates { client_tls, root_cert })
    }

    pub fn new(config: RedisSinkConfig, source_id: &str) -> Self {
        Self {
            checkpoint_key: config
                .checkpoint_key
                .clone()
                .unwrap_or_else(|| format!("sluice:checkpoint:{source_id}::sink::{}", config.id)),
            stream: Template::parse(&config.stream),
            timeout: Duration::from_secs(config.timeout_secs),
            script: redis::Script::new(APPEND),
            conn: None,
            held: None,
            encoder: SharedEncoder::new(&config.format, RedisSinkConfig::CARRIER, format!("redis sink {:?}", config.id)),
            config,
        }
    }

    fn error(&self, context: &str, e: redis::RedisError) -> SinkError {
        use redis::ErrorKind::*;
        match e.kind() {
            IoError | TryAgain | ClusterDown | BusyLoadingError | MasterDown => {
                SinkError::transient_from(format!("redis sink {:?}: {context}: {e}", self.config.id), e)
            }
            Moved | Ask | CrossSlot => SinkError::permanent_from(
                format!("redis sink {:?}: {context}: {e}", self.config.id),
                "this sink needs a standalone Redis; Redis Cluster is not supported",
                e,
            ),
            AuthenticationFailed => SinkError::permanent_from(
                format!("redis sink {:?}: {context}: {e}", self.config.id),
                "check the url's user and the password",
                e,
            ),
            _ => SinkError::transient_from(format!("redis sink {:?}: {context}: {e}", self.config.id), e),
        }
    }


    async fn call<T>(
        &self,
        context: &str,
        future: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, SinkError> {
        match tokio::time::timeout(self.timeout, future).await {
            Ok(result) => result.map_err(|e| self.error(context, e)),
            Err(_) => Err(SinkError::transient(format!(
                "redis sink {:?}: {context} took longer than {}s",
                self.config.id,
                self.timeout.as_secs()
            ))),
        }
    }
}

#[async_trait]
impl Sink for RedisSink {
    fn id(&self) -> &str {
        &self.config.id
    }

    /// The sink's own open only reads: it connects, logs in and reads the
    /// checkpoint key.
    async fn preflight(&mut self) -> Vec<sluice_core::preflight::Check> {
        let opened = self.open().await;
        let check = crate::preflight::outcome(
            "server",
            opened,
            "connected, logged in, and read the checkpoint key",
            "check url, that the server runs, the password and the TLS files",
        );
        self.conn = None;
        vec![check]
    }

    fn guarantee(&self) -> Guarantee {
        self.config.guarantee()
    }

    fn reads_back_what_it_holds(&self) -> bool {
        true
    }

    async fn open(&mut self) -> Result<Option<Position>, SinkError> {
        self.conn = None;
        // An unreachable registry or refused credentials show at start.
        self.encoder.probe().await?;
        let mut info = redis::IntoConnectionInfo::into_connection_info(self.config.url.as_str()).map_err(|e| {
            SinkError::permanent_from(
                format!("redis sink {:?}: bad url: {e}", self.config.id),
                "write redis://host:port[/db]",
                e,
            )
        })?;
        if !self.config.password.expose().is_empty() {
            info.redis.password = Some(self.config.password.expose().to_string());
        }
        let client = if self.config.url.starts_with("rediss://") {
            redis::Client::build_with_tls(info, self.tls_certificates()?).map_err(|e| self.error("TLS client", e))?
        } else {
            redis::Client::open(info).map_err(|e| self.error("client", e))?
        };
        let mut conn = self.call("connecting", client.get_multiplexed_async_connection()).await?;
        let stored: Option<String> = self
            .call("reading the checkpoint", redis::cmd("GET").arg(&self.checkpoint_key).query_async(&mut conn))
            .await?;
        self.conn = Some(conn);
        self.held = match stored {
            None => None,
            Some(value) => {
                let text = value.split_once('|').map_or(value.as_str(), |(_, p)| p);
                Some(text.parse().map_err(|e| {
                    SinkError::permanent(
                        format!(
                            "redis sink {:?}: checkpoint key {} holds {value:?}: {e}",
                            self.config.id, self.checkpoint_key
                        ),
                        "delete the key (the sink then starts from the store's checkpoint)",
                    )
                })?)
            }
        };
        Ok(self.held.clone())
    }

    async fn write(&mut self, events: &mut dyn EventChunks) -> Result<Option<Position>, SinkError> {
        let mut conn = self.conn.clone().ok_or_else(|| SinkError::transient("redis sink is not open"))?;
        let maxlen = self.config.maxlen.map(|m| m.to_string()).unwrap_or_default();
        let mut stream = String::new();
        let shared = events.shared();
        let own_keys = !self.encoder.defines_keys();
        while let Some(chunk) = events.next_chunk().await? {
            let encoding = self.encoder.chunk(shared.as_ref(), chunk).await;
            let Some(last) = chunk.last() else { continue };
            let mut streams: Vec<String> = Vec::new();
            let mut args: Vec<Cow<[u8]>> = Vec::with_capacity(3 + chunk.len() * 6);
            args.push(format!("{}|{}", last.position.sort_key(), last.position).into_bytes().into());
            args.push(maxlen.as_bytes().into());
            args.push(Cow::Borrowed(&[]));
            let mut entries_of = Vec::new();
            let mut count = 0usize;
            for (at, event) in chunk.iter().enumerate() {
                self.stream.render(event, &mut stream);
                let index = match streams.iter().position(|s| *s == stream) {
                    Some(index) => index,
                    None => {
                        streams.push(stream.clone());
                        streams.len() - 1
                    }
                };
                let records = encoding.records(&self.encoder, at, event)?;
                let sort_key = event.position.sort_key().into_bytes();
                let mut push = |args: &mut Vec<Cow<'_, [u8]>>, id: String| {
                    args.push(sort_key.clone().into());
                    args.push((index + 2).to_string().into_bytes().into());
                    args.push(id.into_bytes().into());
                    count += 1;
                };
                // Avro's datums depend on the stream (the subject's name),
                // so they are this sink's own, not the shared records.
                if let Some(finished) = self.encoder.finish_all(records, &stream, event).await? {
                    let mut own = Vec::new();
                    entries(event, &finished, own_keys, &mut own);
                    for entry in own {
                        push(&mut args, entry.id);
                        args.push(Cow::Owned(entry.key.into_owned()));
                        args.push(event.op.code().as_bytes().into());
                        args.push(Cow::Owned(entry.payload.to_vec()));
                    }
                    continue;
                }
                entries_of.clear();
                entries(event, records, own_keys, &mut entries_of);
                for entry in entries_of.drain(..) {
                    push(&mut args, entry.id);
                    args.push(entry.key);
                    args.push(event.op.code().as_bytes().into());
                    args.push(entry.payload.into());
                }
            }
            args[2] = count.to_string().into_bytes().into();
            let mut invocation = self.script.prepare_invoke();
            invocation.key(&self.checkpoint_key);
            for name in &streams {
                invocation.key(name);
            }
            for arg in &args {
                invocation.arg(arg.as_ref());
            }
            let _appended: i64 = self.call("appending", invocation.invoke_async(&mut conn)).await?;
            self.held = Some(last.position.clone());
        }
        // The write ends past its last event (or has none) where the
        // pipeline's transforms dropped events: the checkpoint key moves on
        // to its end all the same, so a restart does not read them again.
        let end = events.last_position();
        if self.held.as_ref().is_none_or(|held| held < end) {
            let mut invocation = self.script.prepare_invoke();
            invocation.key(&self.checkpoint_key);
            invocation.arg(format!("{}|{}", end.sort_key(), end)).arg("").arg("0");
            let _appended: i64 = self.call("moving the checkpoint", invocation.invoke_async(&mut conn)).await?;
            self.held = Some(end.clone());
        }
        Ok(self.held.clone())
    }

    async fn flush(&mut self) -> Result<Option<Position>, SinkError> {
        Ok(self.held.clone())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.conn = None;
        Ok(())
    }

    /// Appends the event with a plain XADD; the checkpoint key stays put.
    async fn redeliver(&mut self, event: &Event) -> Result<(), SinkError> {
        if self.conn.is_none() {
            self.open().await?;
        }
        let mut conn = self.conn.clone().ok_or_else(|| SinkError::transient("redis sink is not open"))?;
        let mut stream = String::new();
        self.stream.render(event, &mut stream);
        let mut records = Vec::new();
        let id = event.id().to_string();
        crate::encoded::encode(self.encoder.encoder(), "redis sink", event, &id, &mut records)?;
        if let Some(finished) = self.encoder.finish_all(&records, &stream, event).await? {
            records = finished;
        }
        let mut entries_of = Vec::new();
        entries(event, &records, !self.encoder.defines_keys(), &mut entries_of);
        for entry in entries_of {
            let mut command = redis::cmd("XADD");
            command.arg(&stream);
            if let Some(maxlen) = self.config.maxlen {
                command.arg("MAXLEN").arg("~").arg(maxlen);
            }
            command.arg("*").arg("id").arg(&entry.id).arg("key").arg(entry.key).arg("op").arg(event.op.code());
            command.arg("payload").arg(entry.payload);
            let _id: String = self.call("appending", command.query_async(&mut conn)).await?;
        }
        Ok(())
    }
}
