//! The transforms' settings, as a config file gives them.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::Transform;

/// One entry of a `transforms:` list, chosen by its `type`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TransformConfig {
    Filter(FilterConfig),
    Columns(ColumnsConfig),
    Mask(MaskConfig),
    Route(RouteConfig),
    Unwrap(UnwrapConfig),
    Outbox(OutboxConfig),
    Vrl(VrlConfig),
}

impl TransformConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            TransformConfig::Filter(_) => "filter",
            TransformConfig::Columns(_) => "columns",
            TransformConfig::Mask(_) => "mask",
            TransformConfig::Route(_) => "route",
            TransformConfig::Unwrap(_) => "unwrap",
            TransformConfig::Outbox(_) => "outbox",
            TransformConfig::Vrl(_) => "vrl",
        }
    }

    /// Whether the settings build: what `sluice validate` reports.
    pub fn check(&self) -> Result<(), String> {
        self.build().map(|_| ())
    }

    /// A function the step calls whose result a replay would not repeat
    /// (a VRL script's `now()`), which an exactly-once sink cannot take.
    pub fn nondeterministic(&self) -> Result<Option<String>, String> {
        match self {
            #[cfg(feature = "vrl")]
            TransformConfig::Vrl(c) => crate::vrl_script::nondeterministic(c),
            _ => Ok(None),
        }
    }

    /// Why the step may fail on an event at run time, if it may: a VRL
    /// script that calls a function with `!`, an outbox that refuses
    /// updates. Errors in the config itself are for `build`.
    pub fn may_fail(&self) -> Option<&'static str> {
        match self {
            #[cfg(feature = "vrl")]
            TransformConfig::Vrl(c) => crate::vrl_script::fallible(c).then_some("its script calls a function with `!`"),
            TransformConfig::Outbox(c) if c.updates == crate::OutboxUpdates::Error => {
                Some("it fails on an update of an outbox row (updates: error)")
            }
            _ => None,
        }
    }

    pub(crate) fn build(&self) -> Result<Box<dyn Transform>, String> {
        Ok(match self {
            TransformConfig::Filter(c) => Box::new(crate::filter::Filter::new(c)?),
            TransformConfig::Columns(c) => Box::new(crate::columns::ColumnsTransform::new(c)?),
            TransformConfig::Mask(c) => Box::new(crate::mask::Mask::new(c)?),
            TransformConfig::Route(c) => Box::new(crate::route::Route::new(c)?),
            TransformConfig::Unwrap(c) => Box::new(crate::unwrap::Unwrap::new(c)?),
            TransformConfig::Outbox(c) => Box::new(crate::outbox::Outbox::new(c)?),
            #[cfg(feature = "vrl")]
            TransformConfig::Vrl(c) => Box::new(crate::vrl_script::Vrl::new(c)?),
            #[cfg(not(feature = "vrl"))]
            TransformConfig::Vrl(_) => return Err(NO_VRL.into()),
        })
    }
}

/// `filter`: events that match every condition given are dropped
/// (`action: drop`, the default) or are the only ones kept (`keep`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    #[serde(default)]
    pub action: FilterAction,
    /// Op codes: `c`, `u`, `d`, `r`, `t`, `m` (a log message), `s` (a
    /// schema change); empty matches the row changes (`c` to `t`).
    #[serde(default)]
    pub ops: Vec<String>,
    /// Table patterns (`public.*`); empty matches every table.
    #[serde(default)]
    pub tables: Vec<String>,
    /// Column conditions, all of which must hold.
    #[serde(default, rename = "where")]
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterAction {
    #[default]
    Drop,
    Keep,
}

/// A test of one column of the row image (the new row; the old one for a
/// delete). Exactly one of the tests is given.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub column: String,
    /// The value's text form equals this.
    pub equals: Option<Scalar>,
    /// The value's text form is one of these.
    #[serde(rename = "in")]
    pub one_of: Option<Vec<Scalar>>,
    /// The value's text form matches this regular expression.
    pub regex: Option<String>,
    /// `true`: the value is NULL; `false`: it is not.
    pub is_null: Option<bool>,
    /// `true`: the event is an update whose old and new values of the
    /// column differ; `false`: it is not.
    pub changed: Option<bool>,
}

/// A value written in the config: compared by its text form.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl Scalar {
    pub fn text(&self) -> String {
        match self {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Text(s) => s.clone(),
        }
    }
}

/// `columns`: keep only `include`d columns, or leave out `exclude`d ones,
/// and `rename` columns, in the events of the matching tables.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnsConfig {
    /// Table patterns; empty matches every table.
    #[serde(default)]
    pub tables: Vec<String>,
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Old name to new name.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
}

/// `mask`: the values of `columns` replaced, in the key, the old and the
/// new row, by what `with` says.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskConfig {
    /// Table patterns; empty matches every table.
    #[serde(default)]
    pub tables: Vec<String>,
    pub columns: Vec<String>,
    pub with: MaskWith,
}

/// What a masked value becomes; exactly one of these is given.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskWith {
    /// This text in place of every value.
    pub fixed: Option<String>,
    /// The hex SHA-256 of the salt followed by the value's text: equal
    /// values stay equal, so the column still joins.
    pub sha256: Option<Sha256>,
    /// The first this many characters of the value's text.
    pub truncate: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sha256 {
    pub salt: String,
}

/// `route`: the matching events go to the destination `to` names, which
/// sinks use in place of the table's name (`${table}` in their templates,
/// the database sinks' target table, the object sinks' prefix).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Table patterns; empty matches every table.
    #[serde(default)]
    pub tables: Vec<String>,
    /// A regular expression the whole table name must match; its groups
    /// are `$1`, `$2`, … in `to`.
    pub regex: Option<String>,
    /// The destination's name: text with `${db}`, `${schema}`, `${name}`
    /// (the table's name without its schema), `${table}` and `$1`….
    pub to: String,
}

/// `unwrap`: the row alone in place of the change envelope, as Debezium's
/// `ExtractNewRecordState` gives it to flat consumers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnwrapConfig {
    /// Table patterns; empty matches every table.
    #[serde(default)]
    pub tables: Vec<String>,
    /// What a delete becomes (Debezium's `delete.tombstone.handling.mode`).
    #[serde(default)]
    pub delete_handling: DeleteHandling,
    /// Fields of the change added to the row, by Debezium's names: `op`,
    /// a `source` field (`table`, `lsn`, `source.ts_ms`, …), each as
    /// `<prefix><name>` (`source.ts_ms` as `__source_ts_ms`), or
    /// `name:new_name` for `<prefix>new_name`.
    #[serde(default)]
    pub add_fields: Vec<String>,
    #[serde(default = "default_prefix")]
    pub add_fields_prefix: String,
}

fn default_prefix() -> String {
    "__".into()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteHandling {
    /// Deletes are left out.
    Drop,
    /// A delete becomes its key with no value.
    #[default]
    Tombstone,
    /// A delete becomes its old row with `__deleted: "true"`; every other
    /// row gets `__deleted: "false"`.
    Rewrite,
}

/// `outbox`: rows inserted into an outbox table become the messages they
/// describe, as Debezium's outbox `EventRouter` makes them. The defaults
/// are Debezium's column names.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// The outbox tables' patterns; other tables' events pass unchanged.
    pub tables: Vec<String>,
    /// The event id, sent as the `id` header.
    #[serde(default = "default_id")]
    pub id: String,
    /// The message key; none without it.
    #[serde(default = "default_key")]
    pub key: Option<String>,
    /// The message value.
    #[serde(default = "default_payload")]
    pub payload: String,
    /// The column whose value names the destination.
    #[serde(default = "default_route_by")]
    pub route_by: String,
    /// The destination, with `${routedByValue}` for the `route_by` value.
    #[serde(default = "default_to")]
    pub to: String,
    /// More columns sent as headers.
    #[serde(default)]
    pub headers: Vec<OutboxHeader>,
    /// What an update of an outbox row does.
    #[serde(default)]
    pub updates: OutboxUpdates,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxHeader {
    pub column: String,
    pub name: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxUpdates {
    /// Left out, as Debezium's default `warn` does.
    #[default]
    Skip,
    /// Sent to the dead letter queue.
    Error,
}

fn default_id() -> String {
    "id".into()
}

fn default_key() -> Option<String> {
    Some("aggregateid".into())
}

fn default_payload() -> String {
    "payload".into()
}

fn default_route_by() -> String {
    "aggregatetype".into()
}

fn default_to() -> String {
    "outbox.event.${routedByValue}".into()
}

#[cfg(not(feature = "vrl"))]
const NO_VRL: &str = "this sluice was built without VRL (the cargo feature `vrl`); use a build with it";

/// `vrl`: a Vector Remap Language script run on each event.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VrlConfig {
    /// Table patterns; empty matches every table.
    #[serde(default)]
    pub tables: Vec<String>,
    /// The script.
    pub source: Option<String>,
    /// A file holding the script, read when the config is loaded.
    pub file: Option<String>,
}
