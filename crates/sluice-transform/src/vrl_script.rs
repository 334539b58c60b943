//! `vrl`: a Vector Remap Language script over each event.
//!
//! The script sees the event as `.`: `op`, `db`, `table`, `key`,
//! `before`, `after` and `source` (`id`, `position`, `tx_id`,
//! `commit_time_us`, `schema_version`); it may change `key`, `before` and
//! `after`, and set `route`, and the rest is read-only (assigning to it is
//! a compile error). `abort` drops the event; a runtime error fails it,
//! with the line and column of the failing expression. Compiled once, when
//! the step is built.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use sluice_core::{ColumnSchema, ColumnType, Event, JsonText, Row, TableSchema, Value};
use vrl::compiler::state::RuntimeState;
use vrl::compiler::{CompileConfig, Context, ExpressionError, Function, Program, TargetValue, TimeZone, TypeState};
use vrl::diagnostic::{Diagnostic, Label, Severity, Span};
use vrl::value::{KeyString, ObjectMap, Secrets, Value as VrlValue};

use crate::config::VrlConfig;
use crate::rows::Tables;
use crate::{Transform, TransformError, Verdict};

/// The functions whose result is not a function of their arguments: a
/// replay would get another value.
pub(crate) const NONDETERMINISTIC: &[&str] = &[
    "now",
    "random_bool",
    "random_bytes",
    "random_float",
    "random_int",
    "uuid_v4",
    "uuid_v7",
    "get_hostname",
    "get_timezone_name",
    "get_env_var",
    "dns_lookup",
    "reverse_dns",
    "http_request",
    "parse_syslog",
    "parse_klog",
    "parse_linux_authorization",
];

const READ_ONLY: &[&str] = &["op", "db", "table", "source"];

thread_local! {
    /// A script's variables, emptied before each event: kept so that their
    /// map is not made and freed for every event.
    static VARIABLES: std::cell::RefCell<RuntimeState> = std::cell::RefCell::new(RuntimeState::default());
}

pub(crate) struct Vrl {
    tables: Tables,
    program: Program,
    /// The fields of `.` the script reads or writes: only those are made
    /// into VRL values and read back.
    uses: Uses,
    source: Arc<str>,
    /// UTC, so time functions give the same text on every machine.
    timezone: TimeZone,
    /// The schemas of the script's rows, by the schema they came with and
    /// the rows' column names and kinds: one per shape, not one per event,
    /// so formats and sinks that key on the schema see a few.
    schemas: Mutex<HashMap<(usize, String), SchemaPair>>,
}

/// A schema the script's rows came with (held, so its address stays its
/// own) and the one they leave with.
type SchemaPair = (Arc<TableSchema>, Arc<TableSchema>);

/// More shapes than a script makes of its tables: a sign the kinds vary
/// by row, so the map starts over rather than grow.
const MAX_SCHEMAS: usize = 1024;

/// The script's text, from `source` or `file`.
pub(crate) fn text(config: &VrlConfig) -> Result<String, String> {
    match (&config.source, &config.file) {
        (Some(source), None) => Ok(source.clone()),
        (None, Some(file)) => std::fs::read_to_string(file)
            .map_err(|e| format!("file: cannot read {file:?}: {e}; give a readable .vrl file")),
        _ => Err("give the script as source or as file, one of them".into()),
    }
}

fn functions(deterministic: bool) -> Vec<Box<dyn Function>> {
    let all = vrl::stdlib::all();
    if !deterministic {
        return all;
    }
    all.into_iter().filter(|f| !NONDETERMINISTIC.contains(&f.identifier())).collect()
}

fn compile(source: &str, deterministic: bool) -> Result<Program, String> {
    compiled(source, deterministic).map_err(|diagnostics| {
        let errors: Vec<String> = diagnostics.iter().map(|d| describe(source, d)).collect();
        errors.join("; ")
    })
}

/// The program, or the errors (not the warnings) that stopped it.
fn compiled(source: &str, deterministic: bool) -> Result<Program, Vec<Diagnostic>> {
    let mut config = CompileConfig::default();
    for path in READ_ONLY {
        config.set_read_only_path(vrl::owned_event_path!(*path), true);
    }
    match vrl::compiler::compile_with_state(source, &functions(deterministic), &TypeState::default(), config) {
        Ok(result) => Ok(result.program),
        Err(diagnostics) => {
            Err(diagnostics.iter().filter(|d| matches!(d.severity, Severity::Error | Severity::Bug)).cloned().collect())
        }
    }
}

/// A diagnostic as `line L, column C: message (label)`.
fn describe(source: &str, diagnostic: &Diagnostic) -> String {
    let primary = diagnostic.labels.iter().find(|l| l.primary).or(diagnostic.labels.first());
    match primary {
        Some(label) => {
            let (line, column) = place(source, label.span);
            let detail = if label.message.is_empty() { String::new() } else { format!(" ({})", label.message) };
            format!("line {line}, column {column}: {}{detail} [E{:03}]", diagnostic.message, diagnostic.code)
        }
        None => format!("{} [E{:03}]", diagnostic.message, diagnostic.code),
    }
}

/// The line and column (from 1, in characters) where `span` starts.
fn place(source: &str, span: Span) -> (usize, usize) {
    let before = &source[..span.start().min(source.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The first nondeterministic function the script calls, if any: the
/// script compiles with every function, and without those calls it to
/// one that is not there.
pub(crate) fn nondeterministic(config: &VrlConfig) -> Result<Option<String>, String> {
    const UNDEFINED_FUNCTION: usize = 105;
    let source = text(config)?;
    compile(&source, false)?;
    let Err(diagnostics) = compiled(&source, true) else { return Ok(None) };
    let called = diagnostics.iter().filter(|d| d.code == UNDEFINED_FUNCTION).find_map(|d| {
        let span = d.labels.iter().find(|l| l.primary)?.span;
        let text = source.get(span.start()..span.end())?;
        let name = text.split(['(', '!']).next()?.trim();
        NONDETERMINISTIC.contains(&name).then(|| format!("{name}()"))
    });
    Ok(Some(called.unwrap_or_else(|| "a function that is not deterministic".into())))
}

impl Vrl {
    pub fn new(config: &VrlConfig) -> Result<Self, String> {
        let source = text(config)?;
        let program = compile(&source, false)?;
        let timezone = TimeZone::parse("UTC").ok_or("the UTC time zone is missing")?;
        let uses = Uses::of(program.info());
        Ok(Self {
            tables: Tables::new(&config.tables)?,
            uses,
            program,
            source: source.into(),
            timezone,
            schemas: Mutex::new(HashMap::new()),
        })
    }
}

impl Transform for Vrl {
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError> {
        if !self.tables.matches(&event.table) {
            return Ok(Verdict::Keep);
        }
        let mut target = TargetValue {
            value: VrlValue::Object(exposed(event, &self.uses)),
            metadata: VrlValue::Object(BTreeMap::new()),
            secrets: Secrets::default(),
        };
        let resolved = VARIABLES.with_borrow_mut(|variables| {
            variables.clear();
            self.program.resolve(&mut Context::new(&mut target, variables, &self.timezone))
        });
        match resolved {
            Ok(_) | Err(ExpressionError::Return { .. }) => {}
            Err(ExpressionError::Abort { .. }) => return Ok(Verdict::Drop),
            Err(error) => return Err(TransformError(self.runtime_error(&error))),
        }
        let VrlValue::Object(mut result) = target.value else {
            return Err(TransformError("the script left `.` something other than an object".into()));
        };
        let images = [&mut event.key, &mut event.before, &mut event.after];
        for (index, (field, image)) in IMAGES.into_iter().zip(images).enumerate() {
            if self.uses.has(field) {
                put_back(field, result.remove(field), image, self.uses.columns(index))?;
            }
        }
        event.route = match result.remove("route") {
            None | Some(VrlValue::Null) => event.route.take(),
            Some(VrlValue::Bytes(b)) => Some(String::from_utf8_lossy(&b).into()),
            Some(VrlValue::String(s)) => Some(Arc::from(&*s)),
            Some(other) => return Err(TransformError(format!("`.route` must be a string, not {}", kind(&other)))),
        };
        if let Some(schema) = &event.schema {
            event.schema = Some(self.retyped(schema, event.after.as_ref().or(event.before.as_ref())));
        }
        Ok(Verdict::Keep)
    }
}

impl Vrl {
    /// The schema for the script's row: the old one where nothing it
    /// declares changed, else one worked out once per shape of row.
    fn retyped(&self, schema: &Arc<TableSchema>, row: Option<&Row>) -> Arc<TableSchema> {
        let Some(row) = row else { return Arc::clone(schema) };
        let same = schema.columns.len() == row.columns.len()
            && schema.columns.iter().zip(row.columns.iter()).all(|(c, name)| c.name == *name)
            && schema.columns.iter().zip(&row.values).all(|(c, v)| fits(&c.ty, v));
        if same {
            return Arc::clone(schema);
        }
        let mut shape = String::with_capacity(row.columns.len() * 12);
        for (name, value) in row.columns.iter().zip(&row.values) {
            shape.push_str(name);
            shape.push(char::from(b'a' + declared_kind(value)));
        }
        let key = (Arc::as_ptr(schema) as *const u8 as usize, shape);
        let mut schemas = self.schemas.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if schemas.len() >= MAX_SCHEMAS && !schemas.contains_key(&key) {
            schemas.clear();
        }
        let entry = schemas.entry(key).or_insert_with(|| (Arc::clone(schema), retyped(schema, row)));
        Arc::clone(&entry.1)
    }

    fn runtime_error(&self, error: &ExpressionError) -> String {
        let labels: &[Label] = match error {
            ExpressionError::Error { labels, .. } => labels,
            _ => &[],
        };
        let span = labels.iter().find(|l| l.primary).or(labels.first()).map(|l| l.span).or(match error {
            ExpressionError::Fallible { span } | ExpressionError::Missing { span, .. } => Some(*span),
            _ => None,
        });
        match span {
            Some(span) => {
                let (line, column) = place(&self.source, span);
                format!("the script failed at line {line}, column {column}: {error}")
            }
            None => format!("the script failed: {error}"),
        }
    }
}

/// The parts of `.` a program reads or writes: the top-level fields (all
/// of them when it takes `.` whole), and for each row image the script
/// reaches only through named columns, those columns.
struct Uses {
    /// Bit `i` for `FIELDS[i]`: asked for every event, so not a list of names.
    fields: u8,
    /// By [`IMAGES`]: `None` where the script takes the image whole or
    /// does not use it.
    columns: [Option<Vec<String>>; 3],
}

const FIELDS: [&str; 8] = ["op", "db", "table", "source", "key", "before", "after", "route"];

const IMAGES: [&str; 3] = ["key", "before", "after"];

impl Uses {
    fn of(info: &vrl::compiler::ProgramInfo) -> Self {
        let mut fields = 0;
        let mut whole = [false; 3];
        let mut columns: [Vec<String>; 3] = Default::default();
        for path in info.target_queries.iter().chain(&info.target_assignments) {
            if path.prefix != vrl::path::PathPrefix::Event {
                continue;
            }
            let segments = &path.path.segments;
            let Some(vrl::path::OwnedSegment::Field(name)) = segments.first() else {
                return Self { fields: u8::MAX, columns: Default::default() };
            };
            // A field of `.` outside FIELDS is the script's own: never read back.
            if let Some(bit) = FIELDS.iter().position(|f| *f == name.as_str()) {
                fields |= 1 << bit;
            }
            if let Some(image) = IMAGES.iter().position(|i| *i == name.as_str()) {
                match segments.get(1) {
                    Some(vrl::path::OwnedSegment::Field(column)) => columns[image].push(column.to_string()),
                    _ => whole[image] = true,
                }
            }
        }
        let columns = std::array::from_fn(|i| {
            let mut named = std::mem::take(&mut columns[i]);
            named.sort_unstable();
            named.dedup();
            (!whole[i]).then_some(named)
        });
        Self { fields, columns }
    }

    fn has(&self, field: &str) -> bool {
        FIELDS.iter().position(|f| *f == field).is_some_and(|bit| self.fields & (1 << bit) != 0)
    }

    /// The columns of image `IMAGES[image]` the script names, when it
    /// names them and never takes the image whole.
    fn columns(&self, image: usize) -> Option<&[String]> {
        self.columns[image].as_deref()
    }
}

/// The event as the script sees it: the fields it uses. The text of the
/// columns it sees is moved out, not copied: [`put_back`] replaces or
/// removes each of them, and on a failure the event is not used again.
fn exposed(event: &mut Event, uses: &Uses) -> ObjectMap {
    let mut object = ObjectMap::new();
    if uses.has("source") {
        let mut source = ObjectMap::new();
        source.insert("id".into(), VrlValue::from(event.source_id.to_string()));
        source.insert("position".into(), VrlValue::from(event.position.to_string()));
        source.insert("tx_id".into(), VrlValue::from(event.tx_id.to_string()));
        source.insert("commit_time_us".into(), VrlValue::Integer(event.commit_time_us));
        source.insert("schema_version".into(), VrlValue::Integer(i64::from(event.schema_version)));
        object.insert("source".into(), VrlValue::Object(source));
    }
    let text = [("op", event.op.code()), ("db", &*event.database), ("table", &*event.table)];
    for (field, value) in text.into_iter().filter(|(field, _)| uses.has(field)) {
        object.insert(field.into(), VrlValue::from(value));
    }
    let images = [&mut event.key, &mut event.before, &mut event.after];
    for (index, (field, image)) in IMAGES.into_iter().zip(images).enumerate().filter(|(_, (f, _))| uses.has(f)) {
        let value = image.as_mut().map_or(VrlValue::Null, |row| VrlValue::Object(row_out(row, uses.columns(index))));
        object.insert(field.into(), value);
    }
    object
}

/// The columns of `row` the source sent, or those of them in `only`.
fn row_out(row: &mut Row, only: Option<&[String]>) -> ObjectMap {
    let wanted = |column: &str| only.is_none_or(|only| only.iter().any(|c| c == column));
    // Inserted one by one: collecting sorts through a vector made for it.
    let mut object = ObjectMap::new();
    for (column, value) in row.columns.iter().zip(&mut row.values) {
        if !matches!(value, Value::Unchanged) && wanted(column) {
            object.insert(KeyString::from(&**column), value_out(value));
        }
    }
    object
}

/// `value` for the script; its text or bytes are taken, leaving the kind
/// for [`value_back`] to go by.
fn value_out(value: &mut Value) -> VrlValue {
    match value {
        Value::Text(s)
        | Value::Decimal(s)
        | Value::Date(s)
        | Value::Time(s)
        | Value::Timestamp(s)
        | Value::TimestampTz(s) => VrlValue::from(std::mem::take(s)),
        Value::Null | Value::Unchanged => VrlValue::Null,
        Value::Bool(b) => VrlValue::Boolean(*b),
        Value::Int(i) => VrlValue::Integer(*i),
        Value::UInt(u) => i64::try_from(*u).map_or_else(|_| VrlValue::from(u.to_string()), VrlValue::Integer),
        Value::Float(f) => VrlValue::from(serde_json::json!(f)),
        Value::Bytes(b) => VrlValue::Bytes(std::mem::take(b).into()),
        Value::Json(json) => {
            serde_json::from_str::<serde_json::Value>(json.as_str()).map_or(VrlValue::Null, VrlValue::from)
        }
        Value::Array(items) => VrlValue::Array(items.iter_mut().map(value_out).collect()),
    }
}

/// A row image back from the script, into `image`: the old columns in
/// their order, then the new ones in the script's; a value keeps its old
/// kind where the script left it the same kind of thing (a decimal stays a
/// decimal). A column the source did not send stays unsent unless the
/// script set it, and with `only` the columns outside it, which the
/// script never saw, stay as they were.
fn put_back(
    field: &str,
    value: Option<VrlValue>,
    image: &mut Option<Row>,
    only: Option<&[String]>,
) -> Result<(), TransformError> {
    let mut map = match value {
        None | Some(VrlValue::Null) => {
            *image = None;
            return Ok(());
        }
        Some(VrlValue::Object(map)) => map,
        Some(other) => {
            return Err(TransformError(format!("`.{field}` must be an object or null, not {}", kind(&other))));
        }
    };
    let Some(mut row) = image.take() else {
        let columns: Vec<Arc<str>> = map.keys().map(|c| Arc::from(c.as_str())).collect();
        let values = map.into_values().map(|v| value_back(v, None)).collect();
        *image = Some(Row { columns: columns.into(), values });
        return Ok(());
    };
    let seen = |column: &str| only.is_none_or(|only| only.iter().any(|c| c == column));
    let mut gone = Vec::new();
    for (index, (column, value)) in row.columns.iter().zip(row.values.iter_mut()).enumerate() {
        if !seen(column) {
            continue;
        }
        match map.remove(&**column) {
            Some(new) => *value = value_back(new, Some(value)),
            None if matches!(value, Value::Unchanged) => {}
            None => gone.push(index),
        }
    }
    // The common script changes values only: the column list stays shared.
    if !gone.is_empty() || !map.is_empty() {
        let mut columns: Vec<Arc<str>> = Vec::with_capacity(row.columns.len() + map.len());
        let mut values = Vec::with_capacity(columns.capacity());
        for (index, (column, value)) in row.columns.iter().zip(row.values.drain(..)).enumerate() {
            if !gone.contains(&index) {
                columns.push(Arc::clone(column));
                values.push(value);
            }
        }
        for (column, value) in map {
            columns.push(Arc::from(column.as_str()));
            values.push(value_back(value, None));
        }
        row = Row { columns: columns.into(), values };
    }
    *image = Some(row);
    Ok(())
}

fn value_back(value: VrlValue, previous: Option<&Value>) -> Value {
    let text = |s: String| match previous {
        Some(Value::Decimal(_)) => Value::Decimal(s),
        Some(Value::Date(_)) => Value::Date(s),
        Some(Value::Time(_)) => Value::Time(s),
        Some(Value::Timestamp(_)) => Value::Timestamp(s),
        Some(Value::TimestampTz(_)) => Value::TimestampTz(s),
        _ => Value::Text(s),
    };
    match value {
        VrlValue::Null => Value::Null,
        VrlValue::Boolean(b) => Value::Bool(b),
        VrlValue::Integer(i) => Value::Int(i),
        VrlValue::Float(f) => Value::Float(f.into_inner()),
        // Without a copy where the script left the bytes alone.
        VrlValue::Bytes(b) => match (previous, String::from_utf8(Vec::from(b))) {
            (Some(Value::Bytes(_)), Ok(s)) => Value::Bytes(s.into_bytes()),
            (_, Err(e)) => Value::Bytes(e.into_bytes()),
            (_, Ok(s)) => text(s),
        },
        VrlValue::String(s) => text(s.to_string()),
        VrlValue::Timestamp(t) => Value::TimestampTz(t.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string()),
        VrlValue::Array(items) if !matches!(previous, Some(Value::Json(_))) => {
            Value::Array(items.into_iter().map(|v| value_back(v, None)).collect())
        }
        VrlValue::Regex(r) => Value::Text(r.to_string()),
        other => {
            let json: Result<serde_json::Value, _> = other.try_into();
            json.ok().and_then(|j| JsonText::parse(j.to_string()).ok()).map_or(Value::Null, Value::Json)
        }
    }
}

fn kind(value: &VrlValue) -> &'static str {
    match value {
        VrlValue::Object(_) => "an object",
        VrlValue::Array(_) => "an array",
        VrlValue::Null => "null",
        VrlValue::Boolean(_) => "a boolean",
        VrlValue::Integer(_) | VrlValue::Float(_) => "a number",
        VrlValue::Timestamp(_) => "a timestamp",
        _ => "a string",
    }
}

/// The schema for the script's row: the old columns' declarations where
/// a column kept its name and kind, a declaration from the value for a
/// new column or one whose value changed kind.
fn retyped(schema: &TableSchema, row: &Row) -> Arc<TableSchema> {
    let mut primary_key = Vec::new();
    let columns = row
        .columns
        .iter()
        .zip(&row.values)
        .enumerate()
        .map(|(index, (name, value))| {
            let old = schema.columns.iter().position(|c| c.name == *name);
            if old.is_some_and(|i| schema.primary_key.contains(&i)) {
                primary_key.push(index);
            }
            match old.map(|i| &schema.columns[i]) {
                Some(column) if fits(&column.ty, value) => column.clone(),
                _ => declared(name, value),
            }
        })
        .collect();
    Arc::new(TableSchema { columns, primary_key })
}

/// Whether `value` may be a value of a column of type `ty`: NULL and an
/// unsent value fit any, a text fits the types carried as text.
fn fits(ty: &ColumnType, value: &Value) -> bool {
    match value {
        Value::Null | Value::Unchanged => true,
        Value::Bool(_) => matches!(ty, ColumnType::Bool),
        Value::Int(_) | Value::UInt(_) => {
            matches!(ty, ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 | ColumnType::Year)
        }
        Value::Float(_) => matches!(ty, ColumnType::Float32 | ColumnType::Float64),
        Value::Json(_) => matches!(ty, ColumnType::Json),
        Value::Bytes(_) => matches!(ty, ColumnType::Bytes | ColumnType::Bits { .. }),
        Value::Array(_) => matches!(ty, ColumnType::Array(_)),
        Value::Text(_) => !matches!(
            ty,
            ColumnType::Bool
                | ColumnType::Int16
                | ColumnType::Int32
                | ColumnType::Int64
                | ColumnType::Float32
                | ColumnType::Float64
                | ColumnType::Json
                | ColumnType::Bytes
                | ColumnType::Array(_)
        ),
        _ => true,
    }
}

/// Which declaration [`declared`] gives `value`, as a small number.
fn declared_kind(value: &Value) -> u8 {
    match value {
        Value::Bool(_) => 1,
        Value::Int(_) | Value::UInt(_) => 2,
        Value::Float(_) => 3,
        Value::Json(_) => 4,
        Value::Bytes(_) => 5,
        Value::TimestampTz(_) => 6,
        Value::Array(_) => 7,
        _ => 0,
    }
}

fn declared(name: &Arc<str>, value: &Value) -> ColumnSchema {
    let (ty, type_name) = match value {
        Value::Bool(_) => (ColumnType::Bool, "bool"),
        Value::Int(_) | Value::UInt(_) => (ColumnType::Int64, "int8"),
        Value::Float(_) => (ColumnType::Float64, "float8"),
        Value::Json(_) => (ColumnType::Json, "jsonb"),
        Value::Bytes(_) => (ColumnType::Bytes, "bytea"),
        Value::TimestampTz(_) => (ColumnType::TimestampTz { precision: 6 }, "timestamptz"),
        Value::Array(_) => (ColumnType::Array(Box::new(ColumnType::Text { length: None })), "_text"),
        _ => (ColumnType::Text { length: None }, "text"),
    };
    ColumnSchema { name: Arc::clone(name), type_name: type_name.into(), ty, nullable: true, default: None }
}
