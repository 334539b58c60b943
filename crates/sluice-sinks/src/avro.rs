//! Avro records for a sink: each record's key and value datums framed with
//! the registry id of their schema. Each schema version is looked up or
//! registered once per subject, after the registry says the subject's
//! compatibility level takes it; a replay finds the ids the first run
//! registered, so it writes the same bytes.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use sluice_core::{Event, SinkError};
use sluice_format::{AvroSchema, FormatConfig, Record, RegistryConfig, SubjectStrategy};
use sluice_registry::{Registry, RegistryError};

pub(crate) struct AvroWriter {
    config: RegistryConfig,
    registry: Option<Registry>,
    strategy: SubjectStrategy,
    /// Names the sink in errors.
    sink: String,
    /// Keyed by the address of a Connect schema's text, which the entry
    /// holds so the address cannot be reused for another schema.
    schemas: HashMap<usize, Known>,
}

struct Known {
    _connect: Arc<str>,
    avro: Arc<AvroSchema>,
    /// The schema's id under each destination's subject.
    ids: Vec<(String, u32)>,
}

impl AvroWriter {
    /// The writer of an `encoding: avro` format; `None` for any other.
    pub(crate) fn new(config: &FormatConfig, sink: String) -> Option<Self> {
        let registry = config.schema_registry.as_ref().filter(|_| config.is_avro())?;
        Some(Self {
            config: registry.clone(),
            registry: None,
            strategy: config.subject_strategy.unwrap_or_default(),
            sink,
            schemas: HashMap::new(),
        })
    }

    fn registry(&mut self) -> Result<&Registry, SinkError> {
        if self.registry.is_none() {
            let registry = Registry::new(&self.config).map_err(|e| {
                SinkError::permanent(format!("{}: {e}", self.sink), "fix schema_registry in the sink's format")
            })?;
            self.registry = Some(registry);
        }
        Ok(self.registry.as_ref().expect("set above"))
    }

    /// Asks the registry for its compatibility level, so an unreachable
    /// registry or refused credentials show when the sink opens.
    pub(crate) async fn probe(&mut self) -> Result<(), SinkError> {
        let sink = self.sink.clone();
        let registry = self.registry()?;
        registry.global_compatibility().await.map(|_| ()).map_err(|e| classify(&sink, e))
    }

    /// `record` with its datums framed with their schemas' registry ids,
    /// into `out`, whose buffers are reused; `topic` is where it goes,
    /// which names the subjects; `keys: false` drops the key of a sink
    /// that has none, so its schema is not registered.
    pub(crate) async fn encode_into(
        &mut self,
        record: &Record,
        topic: &str,
        event: &Event,
        keys: bool,
        out: &mut Record,
    ) -> Result<(), SinkError> {
        let key = record.key.as_deref().filter(|_| keys);
        self.frame(key, record.key_schema.as_ref(), topic, true, event, &mut out.key).await?;
        self.frame(record.value.as_deref(), record.value_schema.as_ref(), topic, false, event, &mut out.value).await?;
        out.kind = record.kind;
        out.headers.clone_from(&record.headers);
        out.key_schema = None;
        out.value_schema = None;
        Ok(())
    }

    /// The Confluent frame (a zero byte, the schema id in four bytes big
    /// endian) and the datum, into `out`.
    async fn frame(
        &mut self,
        payload: Option<&[u8]>,
        connect: Option<&Arc<str>>,
        topic: &str,
        is_key: bool,
        event: &Event,
        out: &mut Option<Vec<u8>>,
    ) -> Result<(), SinkError> {
        let Some(payload) = payload else {
            *out = None;
            return Ok(());
        };
        let rejected = |detail: String| SinkError::Rejected { detail, position: event.position.clone() };
        let Some(connect) = connect else {
            return Err(rejected(format!("{}: the envelope gave no schema for the record", self.sink)));
        };
        let id = self.resolve(connect, topic, is_key, event).await?;
        let datum = out.get_or_insert_with(Vec::new);
        datum.clear();
        datum.reserve(payload.len() + 5);
        datum.push(0);
        datum.extend_from_slice(&id.to_be_bytes());
        datum.extend_from_slice(payload);
        Ok(())
    }

    async fn resolve(
        &mut self,
        connect: &Arc<str>,
        topic: &str,
        is_key: bool,
        event: &Event,
    ) -> Result<u32, SinkError> {
        let address = Arc::as_ptr(connect) as *const u8 as usize;
        if !self.schemas.contains_key(&address) {
            let avro = AvroSchema::from_connect(connect).map_err(|e| SinkError::Rejected {
                detail: format!("{}: {e}", self.sink),
                position: event.position.clone(),
            })?;
            self.schemas.insert(address, Known { _connect: connect.clone(), avro: Arc::new(avro), ids: Vec::new() });
        }
        let known = &self.schemas[&address];
        if let Some((_, id)) = known.ids.iter().find(|(t, _)| t == topic) {
            return Ok(*id);
        }
        let avro = known.avro.clone();
        let subject = self.strategy.subject(topic, avro.name(), is_key);
        let id = self.id(&subject, &avro, event).await?;
        if let Some(known) = self.schemas.get_mut(&address) {
            known.ids.push((topic.to_string(), id));
        }
        Ok(id)
    }

    /// The id of `avro` under `subject`: the one it has, or a new version
    /// once the subject's compatibility level takes it.
    async fn id(&mut self, subject: &str, avro: &AvroSchema, event: &Event) -> Result<u32, SinkError> {
        let sink = self.sink.clone();
        let registry = self.registry()?;
        let fail = |e: RegistryError| classify(&sink, e);
        if let Some(id) = registry.lookup(subject, avro.text()).await.map_err(fail)? {
            return Ok(id);
        }
        if !registry.is_compatible(subject, avro.text()).await.map_err(fail)? {
            return Err(self.incompatible(subject, avro, event).await);
        }
        match registry.register(subject, avro.text()).await {
            Ok(id) => {
                sluice_core::failpoint::hit("avro.after_register");
                tracing::info!(sink = %sink, subject, id, table = %event.table, "registered a schema version");
                Ok(id)
            }
            // Another writer's version came between the check and this:
            // often the same schema, from another sink of this pipeline
            // writing to the same subject, which then has an id to use.
            Err(RegistryError::Refused { status: 409, .. }) => {
                match registry.lookup(subject, avro.text()).await.map_err(fail)? {
                    Some(id) => Ok(id),
                    None => Err(self.incompatible(subject, avro, event).await),
                }
            }
            Err(e) => Err(fail(e)),
        }
    }

    /// The error that stops the pipeline at a schema change the subject
    /// refuses: the table, what changed, and the level that refuses it.
    async fn incompatible(&mut self, subject: &str, avro: &AvroSchema, event: &Event) -> SinkError {
        let sink = self.sink.clone();
        let registry = match self.registry() {
            Ok(registry) => registry,
            Err(e) => return e,
        };
        let level = match registry.compatibility(subject).await {
            Ok(level) => level,
            Err(e) => return classify(&sink, e),
        };
        let change = match registry.latest(subject).await {
            Ok(Some(latest)) => describe_change(&latest, avro.text()),
            Ok(None) => "the subject has no version to compare with".to_string(),
            Err(e) => return classify(&sink, e),
        };
        SinkError::permanent(
            format!(
                "{sink}: the schema of table {} at {} cannot follow subject {subject:?}'s latest version under its \
                 compatibility level {level}: {change}; nothing from this event on is written",
                event.table, event.position
            ),
            format!(
                "loosen the level (PUT /config/{subject} with {{\"compatibility\": \"NONE\"}}, or another level that \
                 takes the change) or write to a new subject, then start the pipeline again"
            ),
        )
    }
}

fn classify(sink: &str, e: RegistryError) -> SinkError {
    let detail = format!("{sink}: {e}");
    match e {
        RegistryError::Unavailable { .. } => SinkError::transient(detail),
        RegistryError::Unauthorized { .. } => SinkError::permanent(
            detail,
            "check schema_registry.username and password, or bearer_token, and the account's permissions",
        ),
        RegistryError::Refused { .. } | RegistryError::Unexpected { .. } => SinkError::permanent(
            detail,
            "check schema_registry.url: it must be the registry's Confluent-compatible API",
        ),
    }
}

/// What differs between the columns of two schema versions, in words: the
/// fields of the row record for an envelope, the key's own for a key.
fn describe_change(old: &str, new: &str) -> String {
    let (Ok(old), Ok(new)) = (serde_json::from_str::<Value>(old), serde_json::from_str::<Value>(new)) else {
        return "the registry's latest version is not JSON".to_string();
    };
    let (old, new) = (columns(&old), columns(&new));
    let mut changes = Vec::new();
    for (name, ty) in &old {
        match new.iter().find(|(n, _)| n == name) {
            None => changes.push(format!("column {name:?} dropped")),
            Some((_, other)) if other != ty => changes.push(format!("column {name:?} changed from {ty} to {other}")),
            Some(_) => {}
        }
    }
    for (name, ty) in &new {
        if !old.iter().any(|(n, _)| n == name) {
            changes.push(format!("column {name:?} added as {ty}"));
        }
    }
    if changes.is_empty() { "the columns are the same, their metadata differs".to_string() } else { changes.join(", ") }
}

/// The row's columns and types: the fields of an envelope's row record
/// (defined at `before`), else the record's own fields.
fn columns(schema: &Value) -> Vec<(String, String)> {
    let fields = |record: &Value| -> Vec<(String, String)> {
        record["fields"]
            .as_array()
            .map(|fields| {
                fields.iter().map(|f| (f["name"].as_str().unwrap_or("").to_string(), f["type"].to_string())).collect()
            })
            .unwrap_or_default()
    };
    let row = schema["fields"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "before"))
        .and_then(|f| f["type"].as_array())
        .and_then(|branches| branches.iter().find(|b| b.is_object()));
    match row {
        Some(row) => fields(row),
        None => fields(schema),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_change_names_the_columns_dropped_added_and_retyped() {
        let version = |fields: &str| {
            format!(
                r#"{{"type":"record","name":"Envelope","fields":[{{"name":"before","type":["null",{{"type":"record","name":"Value","fields":[{fields}]}}]}},{{"name":"after","type":["null","Value"]}}]}}"#
            )
        };
        let old = version(r#"{"name":"id","type":"int"},{"name":"b","type":"string"},{"name":"c","type":"int"}"#);
        let new =
            version(r#"{"name":"id","type":"int"},{"name":"c","type":"long"},{"name":"d","type":["null","string"]}"#);
        assert_eq!(
            super::describe_change(&old, &new),
            r#"column "b" dropped, column "c" changed from "int" to "long", column "d" added as ["null","string"]"#
        );
    }
}
