//! `outbox`: the rows inserted into an outbox table become the messages
//! they describe, with the semantics of Debezium's outbox `EventRouter`:
//! the destination from the `route_by` column, the key from `key`, the
//! value from `payload`, the event id as the `id` header. Deletes (the
//! usual cleanup of an outbox) and updates are left out; truncates too.

use std::sync::Arc;

use sluice_core::{Event, MessageShape, Op, Shape, Value};

use crate::config::{OutboxConfig, OutboxUpdates};
use crate::rows::{Tables, text};
use crate::{Transform, TransformError, Verdict};

/// The one placeholder `to` takes, named as Debezium's default
/// `route.topic.regex` names its group.
const ROUTED: &str = "${routedByValue}";

pub(crate) struct Outbox {
    tables: Tables,
    route_by: String,
    to: String,
    /// The columns every message is made of.
    shape: Arc<MessageShape>,
    /// The columns a row must have.
    required: Vec<Arc<str>>,
    updates: OutboxUpdates,
}

impl Outbox {
    pub fn new(config: &OutboxConfig) -> Result<Self, String> {
        if config.tables.is_empty() {
            return Err("tables: name the outbox tables (every other table's events pass unchanged)".into());
        }
        let rest = config.to.replace(ROUTED, "");
        if let Some(at) = rest.find("${") {
            let end = rest[at..].find('}').map_or(rest.len(), |e| at + e + 1);
            return Err(format!("to: {} is not a placeholder; the one there is is {ROUTED}", &rest[at..end]));
        }
        for (field, column) in [("id", &config.id), ("payload", &config.payload), ("route_by", &config.route_by)] {
            if column.trim().is_empty() {
                return Err(format!("{field}: name a column"));
            }
        }
        let mut headers: Vec<(Arc<str>, Arc<str>)> = vec![("id".into(), config.id.as_str().into())];
        for header in &config.headers {
            if header.name.is_empty() || header.column.is_empty() {
                return Err("headers: each needs a column and a name".into());
            }
            headers.push((header.name.as_str().into(), header.column.as_str().into()));
        }
        let key = config.key.as_deref().filter(|k| !k.is_empty()).map(Arc::from);
        let shape = MessageShape { key, value: config.payload.as_str().into(), headers };
        let mut required: Vec<Arc<str>> =
            vec![config.id.as_str().into(), shape.value.clone(), config.route_by.as_str().into()];
        required.extend(shape.headers.iter().skip(1).map(|(_, column)| column.clone()));
        Ok(Self {
            tables: Tables::new(&config.tables)?,
            route_by: config.route_by.clone(),
            to: config.to.clone(),
            shape: Arc::new(shape),
            required,
            updates: config.updates,
        })
    }
}

impl Transform for Outbox {
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError> {
        if !self.tables.matches(&event.table) || !event.shape.is_envelope() {
            return Ok(Verdict::Keep);
        }
        match event.op {
            Op::Message | Op::Schema => return Ok(Verdict::Keep),
            Op::Delete | Op::Truncate => return Ok(Verdict::Drop),
            Op::Update if self.updates == OutboxUpdates::Skip => return Ok(Verdict::Drop),
            Op::Update => {
                return Err(TransformError(format!(
                    "an update of the outbox table {}: an outbox only takes inserts (updates: error)",
                    event.table
                )));
            }
            Op::Insert | Op::Read => {}
        }
        let row = event.after.as_ref().ok_or_else(|| TransformError("an outbox insert without its row".into()))?;
        if let Some(missing) = self.required.iter().find(|c| row.get(c).is_none()) {
            return Err(TransformError(format!("the outbox table {} has no column {missing:?}", event.table)));
        }
        let routed = match row.get(&self.route_by) {
            Some(value @ Value::Text(_)) => text(value).unwrap_or_default().into_owned(),
            Some(Value::Null) | None => {
                return Err(TransformError(format!(
                    "the outbox row's {} is NULL: it names no destination",
                    self.route_by
                )));
            }
            Some(other) => other.text().into_owned(),
        };
        event.route = Some(Arc::from(self.to.replace(ROUTED, &routed)));
        event.shape = Shape::Message(Arc::clone(&self.shape));
        Ok(Verdict::Keep)
    }
}
