//! The column lists and schemas of a script's rows, worked out once per
//! shape of row and shared by every row of that shape: formats and sinks
//! that key on the schema see a few, and a row costs no list of its own.
//! What a row gets stays a function of the row (its columns, the kinds of
//! its values, the schema it came with), never of the rows before it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use sluice_core::{ColumnSchema, ColumnType, Row, TableSchema, Value};

type Columns = Arc<[Arc<str>]>;

/// More shapes than a script makes of its tables: a sign the kinds vary
/// by row, so the maps start over rather than grow.
const MAX_SHAPES: usize = 1024;

pub(super) struct Shapes {
    inner: Mutex<Inner>,
    /// What a row the script made from nothing is made from.
    empty: Columns,
}

#[derive(Default)]
struct Inner {
    /// By the address of the list a row came with.
    lists: HashMap<usize, Vec<List>>,
    list_count: usize,
    /// By the addresses of the schema the row came with and of its column
    /// list, and the kinds of its values.
    schemas: HashMap<(usize, usize, Vec<u8>), Typed>,
}

/// A list made from another: `from` without the columns at `gone`, then
/// `added`. `from` is held so that its address stays its own.
struct List {
    _from: Columns,
    gone: Vec<usize>,
    added: Vec<Arc<str>>,
    columns: Columns,
}

/// The schema of rows with a column list that came with a schema; both
/// held, so their addresses stay theirs.
struct Typed {
    _came_with: (Arc<TableSchema>, Columns),
    schema: Arc<TableSchema>,
}

fn address<T: ?Sized>(arc: &Arc<T>) -> usize {
    Arc::as_ptr(arc) as *const u8 as usize
}

impl Shapes {
    pub(super) fn new() -> Self {
        Self { inner: Mutex::new(Inner::default()), empty: Arc::from(Vec::new()) }
    }

    pub(super) fn empty(&self) -> &Columns {
        &self.empty
    }

    /// The list of `from` without the columns at `gone` (in order), then
    /// the `added` names.
    pub(super) fn columns(&self, from: &Columns, gone: &[usize], added: &[&str]) -> Columns {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let same = |list: &&List| list.gone == gone && list.added.iter().map(|a| &**a).eq(added.iter().copied());
        if let Some(list) = inner.lists.get(&address(from)).and_then(|lists| lists.iter().find(same)) {
            return Arc::clone(&list.columns);
        }
        if inner.list_count >= MAX_SHAPES {
            inner.lists.clear();
            inner.list_count = 0;
        }
        let added: Vec<Arc<str>> = added.iter().map(|a| Arc::from(*a)).collect();
        let kept = from.iter().enumerate().filter(|(i, _)| !gone.contains(i)).map(|(_, c)| Arc::clone(c));
        let columns: Columns = kept.chain(added.iter().cloned()).collect();
        let list = List { _from: Arc::clone(from), gone: gone.to_vec(), added, columns: Arc::clone(&columns) };
        inner.lists.entry(address(from)).or_default().push(list);
        inner.list_count += 1;
        columns
    }

    /// The schema for the script's row: the one it came with where
    /// nothing it declares changed, else one worked out once per shape.
    pub(super) fn schema(&self, schema: &Arc<TableSchema>, row: &Row) -> Arc<TableSchema> {
        let same = schema.columns.len() == row.columns.len()
            && schema.columns.iter().zip(row.columns.iter()).all(|(c, name)| c.name == *name)
            && schema.columns.iter().zip(&row.values).all(|(c, v)| fits(&c.ty, v));
        if same {
            return Arc::clone(schema);
        }
        let kinds = row.values.iter().map(declared_kind).collect();
        let key = (address(schema), address(&row.columns), kinds);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.schemas.len() >= MAX_SHAPES && !inner.schemas.contains_key(&key) {
            inner.schemas.clear();
        }
        let typed = inner.schemas.entry(key).or_insert_with(|| Typed {
            _came_with: (Arc::clone(schema), Arc::clone(&row.columns)),
            schema: retyped(schema, row),
        });
        Arc::clone(&typed.schema)
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
