//! `filter`: drop the events that match, or keep only those.

use regex::Regex;
use sluice_core::{Event, Op, Value};

use crate::config::{Condition, FilterAction, FilterConfig};
use crate::rows::{Tables, image, text};
use crate::{Transform, TransformError, Verdict};

pub(crate) struct Filter {
    action: FilterAction,
    ops: Vec<Op>,
    tables: Tables,
    tests: Vec<(String, Test)>,
}

enum Test {
    Equals(String),
    OneOf(Vec<String>),
    Regex(Regex),
    IsNull(bool),
    Changed(bool),
}

fn op(code: &str) -> Result<Op, String> {
    Ok(match code {
        "c" => Op::Insert,
        "u" => Op::Update,
        "d" => Op::Delete,
        "r" => Op::Read,
        "t" => Op::Truncate,
        "m" => Op::Message,
        "s" => Op::Schema,
        other => return Err(format!("ops: {other:?} is not an op; use c, u, d, r, t, m or s")),
    })
}

fn test(condition: &Condition) -> Result<Test, String> {
    let column = &condition.column;
    let mut tests = Vec::new();
    if let Some(value) = &condition.equals {
        tests.push(Test::Equals(value.text()));
    }
    if let Some(values) = &condition.one_of {
        tests.push(Test::OneOf(values.iter().map(|v| v.text()).collect()));
    }
    if let Some(pattern) = &condition.regex {
        let regex =
            Regex::new(pattern).map_err(|e| format!("where: the regex for column {column:?} does not compile: {e}"))?;
        tests.push(Test::Regex(regex));
    }
    if let Some(null) = condition.is_null {
        tests.push(Test::IsNull(null));
    }
    if let Some(changed) = condition.changed {
        tests.push(Test::Changed(changed));
    }
    match tests.len() {
        1 => Ok(tests.remove(0)),
        0 => Err(format!("where: column {column:?} has no test; give one of equals, in, regex, is_null, changed")),
        _ => Err(format!(
            "where: column {column:?} has {} tests; give one per entry (entries must all hold)",
            tests.len()
        )),
    }
}

impl Filter {
    pub fn new(config: &FilterConfig) -> Result<Self, String> {
        let conditions = config.conditions.iter().map(|c| Ok((c.column.clone(), test(c)?)));
        Ok(Self {
            action: config.action,
            ops: config.ops.iter().map(|c| op(c)).collect::<Result<_, _>>()?,
            tables: Tables::new(&config.tables)?,
            tests: conditions.collect::<Result<_, String>>()?,
        })
    }

    fn matches(&self, event: &Event) -> bool {
        (self.ops.is_empty() || self.ops.contains(&event.op))
            && self.tables.matches(&event.table)
            && self.tests.iter().all(|(column, test)| holds(event, column, test))
    }
}

/// Whether `test` holds for `column` of `event`. A column the row lacks,
/// or whose value the source did not send, holds no test but a negative
/// `changed` (nothing is known to have changed).
fn holds(event: &Event, column: &str, test: &Test) -> bool {
    let value = || image(event).and_then(|row| row.get(column)).filter(|v| !matches!(v, Value::Unchanged));
    match test {
        Test::Changed(want) => changed(event, column) == *want,
        Test::IsNull(want) => value().is_some_and(|v| matches!(v, Value::Null) == *want),
        Test::Equals(want) => value().and_then(text).is_some_and(|t| t == *want),
        Test::OneOf(wants) => value().and_then(text).is_some_and(|t| wants.iter().any(|w| *w == t)),
        Test::Regex(regex) => value().and_then(text).is_some_and(|t| regex.is_match(&t)),
    }
}

fn changed(event: &Event, column: &str) -> bool {
    let (Op::Update, Some(before), Some(after)) = (event.op, &event.before, &event.after) else { return false };
    match (before.get(column), after.get(column)) {
        (Some(Value::Unchanged), _) | (_, Some(Value::Unchanged)) | (None, _) | (_, None) => false,
        (Some(old), Some(new)) => old != new,
    }
}

impl Transform for Filter {
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError> {
        // A filter is about row changes: a log message or a schema change
        // passes any filter whose `ops` does not name it.
        if matches!(event.op, Op::Message | Op::Schema) && !self.ops.contains(&event.op) {
            return Ok(Verdict::Keep);
        }
        let keep = match self.action {
            FilterAction::Drop => !self.matches(event),
            FilterAction::Keep => self.matches(event),
        };
        Ok(if keep { Verdict::Keep } else { Verdict::Drop })
    }
}
