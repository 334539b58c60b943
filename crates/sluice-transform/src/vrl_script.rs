//! `vrl`: a Vector Remap Language script over each event.
//!
//! The script sees the event as `.`: `op`, `db`, `table`, `key`,
//! `before`, `after` and `source` (`id`, `position`, `tx_id`,
//! `commit_time_us`, `schema_version`); it may change `key`, `before` and
//! `after`, and set `route`, and the rest is read-only (assigning to it is
//! a compile error). `abort` drops the event; a runtime error fails it,
//! with the line and column of the failing expression. Compiled once, when
//! the step is built.

mod shapes;
mod values;

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::Event;
use vrl::compiler::state::RuntimeState;
use vrl::compiler::{CompileConfig, Context, ExpressionError, Function, Program, TargetValue, TimeZone, TypeState};
use vrl::diagnostic::{Diagnostic, Label, Severity, Span};
use vrl::value::{Secrets, Value as VrlValue};

use crate::config::VrlConfig;
use crate::rows::Tables;
use crate::{Transform, TransformError, Verdict};
use shapes::Shapes;
use values::{exposed, kind, put_back};

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
    /// The column lists and schemas of the script's rows.
    shapes: Shapes,
}

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

/// Whether the script can fail at run time: VRL makes every call that
/// can fail be marked `!` or handled, so only those can. A script that does
/// not compile is `build`'s to report.
pub(crate) fn fallible(config: &VrlConfig) -> bool {
    text(config).ok().and_then(|source| compile(&source, false).ok()).is_some_and(|p| p.info().fallible)
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
            shapes: Shapes::new(),
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
                put_back(field, result.remove(field), image, self.uses.columns(index), &self.shapes)?;
            }
        }
        event.route = match result.remove("route") {
            None | Some(VrlValue::Null) => event.route.take(),
            Some(VrlValue::Bytes(b)) => Some(String::from_utf8_lossy(&b).into()),
            Some(VrlValue::String(s)) => Some(Arc::from(&*s)),
            Some(other) => return Err(TransformError(format!("`.route` must be a string, not {}", kind(&other)))),
        };
        if let (Some(schema), Some(row)) = (&event.schema, event.after.as_ref().or(event.before.as_ref())) {
            event.schema = Some(self.shapes.schema(schema, row));
        }
        Ok(Verdict::Keep)
    }
}

impl Vrl {
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
