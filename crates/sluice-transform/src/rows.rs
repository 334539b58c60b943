//! What the transforms share: table patterns, and rewrites of column lists
//! and schemas worked out once per distinct list, not once per event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_core::{Event, Row, Value, glob_match};

/// Table patterns; none matches every table.
pub(crate) struct Tables(Vec<Pattern>);

/// A pattern without `*` is compared as it is: every step asks for every
/// event.
enum Pattern {
    Name(String),
    Glob(String),
}

impl Tables {
    pub fn new(patterns: &[String]) -> Result<Self, String> {
        if let Some(empty) = patterns.iter().find(|p| p.trim().is_empty()) {
            return Err(format!("tables: {empty:?} is not a table pattern"));
        }
        let pattern = |p: &String| if p.contains('*') { Pattern::Glob(p.clone()) } else { Pattern::Name(p.clone()) };
        Ok(Self(patterns.iter().map(pattern).collect()))
    }

    pub fn matches(&self, table: &str) -> bool {
        self.0.is_empty()
            || self.0.iter().any(|p| match p {
                Pattern::Name(name) => name == table,
                Pattern::Glob(glob) => glob_match(glob, table),
            })
    }
}

/// Results keyed by the address of a shared value (a column list, a
/// schema), which each entry holds so the address cannot be reused. Events
/// of one table version share these, so there are only a few.
pub(crate) struct Memo<T: ?Sized, V> {
    map: Mutex<HashMap<usize, (Arc<T>, V)>>,
}

impl<T: ?Sized, V: Clone> Memo<T, V> {
    pub fn new() -> Self {
        Self { map: Mutex::new(HashMap::new()) }
    }

    pub fn get(&self, key: &Arc<T>, make: impl FnOnce(&T) -> V) -> V {
        let address = Arc::as_ptr(key) as *const u8 as usize;
        let mut map = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.entry(address).or_insert_with(|| (Arc::clone(key), make(key))).1.clone()
    }
}

/// The row image conditions look at: the new row, or the old one for a
/// delete.
pub(crate) fn image(event: &Event) -> Option<&Row> {
    event.after.as_ref().or(event.before.as_ref())
}

/// Every row image of `event`: its key, old and new row.
pub(crate) fn rows_mut(event: &mut Event) -> impl Iterator<Item = &mut Row> {
    [&mut event.key, &mut event.before, &mut event.after].into_iter().flatten()
}

/// `value`'s text as conditions and masks see it; `None` for NULL and for
/// a value the source did not send.
pub(crate) fn text(value: &Value) -> Option<std::borrow::Cow<'_, str>> {
    match value {
        Value::Null | Value::Unchanged => None,
        other => Some(other.text()),
    }
}
