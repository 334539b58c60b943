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
}

impl TransformConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            TransformConfig::Filter(_) => "filter",
            TransformConfig::Columns(_) => "columns",
            TransformConfig::Mask(_) => "mask",
            TransformConfig::Route(_) => "route",
        }
    }

    /// Whether the settings build: what `sluice validate` reports.
    pub fn check(&self) -> Result<(), String> {
        self.build().map(|_| ())
    }

    pub(crate) fn build(&self) -> Result<Box<dyn Transform>, String> {
        Ok(match self {
            TransformConfig::Filter(c) => Box::new(crate::filter::Filter::new(c)?),
            TransformConfig::Columns(c) => Box::new(crate::columns::ColumnsTransform::new(c)?),
            TransformConfig::Mask(c) => Box::new(crate::mask::Mask::new(c)?),
            TransformConfig::Route(c) => Box::new(crate::route::Route::new(c)?),
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
