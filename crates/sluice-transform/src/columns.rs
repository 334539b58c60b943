//! `columns`: include, exclude and rename columns.
//!
//! Key columns always stay in the rows, whatever `include` and `exclude`
//! say: sinks key, upsert and delete rows by them. `rename` applies to
//! them as to any other column, in the key as well.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::{Columns, Event, Row, TableSchema, Value};

use crate::config::ColumnsConfig;
use crate::rows::{Memo, Tables};
use crate::{Transform, TransformError, Verdict};

pub(crate) struct ColumnsTransform {
    tables: Tables,
    include: Vec<String>,
    exclude: Vec<String>,
    rename: BTreeMap<String, String>,
    /// Per column list of a row: the list out and where each value comes
    /// from; `None` where nothing changes.
    rows: Memo<[Arc<str>], Option<Arc<Plan>>>,
    keys: Memo<[Arc<str>], Option<Arc<Plan>>>,
    schemas: Memo<TableSchema, Arc<TableSchema>>,
    key_names: Memo<TableSchema, Columns>,
}

pub(crate) struct Plan {
    columns: Columns,
    from: Vec<usize>,
}

impl ColumnsTransform {
    pub fn new(config: &ColumnsConfig) -> Result<Self, String> {
        if !config.include.is_empty() && !config.exclude.is_empty() {
            return Err("give include or exclude, not both".into());
        }
        if config.include.is_empty() && config.exclude.is_empty() && config.rename.is_empty() {
            return Err("give include, exclude or rename".into());
        }
        let mut targets: Vec<&String> = config.rename.values().collect();
        targets.sort();
        if let Some(pair) = targets.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(format!("rename: two columns are renamed to {:?}", pair[0]));
        }
        if let Some((from, _)) = config.rename.iter().find(|(_, to)| to.is_empty()) {
            return Err(format!("rename: column {from:?} is renamed to an empty name"));
        }
        Ok(Self {
            tables: Tables::new(&config.tables)?,
            include: config.include.clone(),
            exclude: config.exclude.clone(),
            rename: config.rename.clone(),
            rows: Memo::new(),
            keys: Memo::new(),
            schemas: Memo::new(),
            key_names: Memo::new(),
        })
    }

    fn kept(&self, name: &str, is_key: bool) -> bool {
        is_key
            || if self.include.is_empty() {
                !self.exclude.iter().any(|c| c == name)
            } else {
                self.include.iter().any(|c| c == name)
            }
    }

    fn name(&self, name: &Arc<str>) -> Arc<str> {
        self.rename.get(&**name).map_or_else(|| Arc::clone(name), |to| Arc::from(to.as_str()))
    }

    fn plan(&self, columns: &[Arc<str>], key_names: &[Arc<str>], drop: bool) -> Option<Arc<Plan>> {
        let from: Vec<usize> =
            (0..columns.len()).filter(|&i| !drop || self.kept(&columns[i], key_names.contains(&columns[i]))).collect();
        let renamed = from.iter().any(|&i| self.rename.contains_key(&*columns[i]));
        if from.len() == columns.len() && !renamed {
            return None;
        }
        let names: Columns = from.iter().map(|&i| self.name(&columns[i])).collect();
        Some(Arc::new(Plan { columns: names, from }))
    }

    fn schema(&self, schema: &TableSchema) -> Arc<TableSchema> {
        let keys = key_names(schema);
        let mut columns = Vec::new();
        let mut primary_key = Vec::new();
        for (index, column) in schema.columns.iter().enumerate() {
            if !self.kept(&column.name, keys.contains(&column.name)) {
                continue;
            }
            if schema.primary_key.contains(&index) {
                primary_key.push(columns.len());
            }
            let mut column = column.clone();
            column.name = self.name(&column.name);
            columns.push(column);
        }
        // Key columns in the key's order, as the source declared it.
        primary_key.sort_by_key(|&new| {
            let name = &columns[new].name;
            schema.primary_key.iter().position(|&old| self.name(&schema.columns[old].name) == *name)
        });
        Arc::new(TableSchema { columns, primary_key })
    }
}

fn key_names(schema: &TableSchema) -> Columns {
    schema.primary_key.iter().filter_map(|&i| schema.columns.get(i)).map(|c| c.name.clone()).collect()
}

fn apply_plan(row: &mut Row, plan: &Plan) {
    let mut values = std::mem::take(&mut row.values);
    row.values = plan.from.iter().map(|&i| std::mem::replace(&mut values[i], Value::Null)).collect();
    row.columns = Arc::clone(&plan.columns);
}

impl Transform for ColumnsTransform {
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError> {
        if !self.tables.matches(&event.table) {
            return Ok(Verdict::Keep);
        }
        let key_names: Columns = match (&event.schema, &event.key) {
            (Some(schema), _) => self.key_names.get(schema, key_names),
            (None, Some(key)) => Arc::clone(&key.columns),
            (None, None) => Columns::from(Vec::new()),
        };
        for row in [&mut event.before, &mut event.after].into_iter().flatten() {
            if let Some(plan) = self.rows.get(&row.columns, |columns| self.plan(columns, &key_names, true)) {
                apply_plan(row, &plan);
            }
        }
        if let Some(key) = &mut event.key
            && let Some(plan) = self.keys.get(&key.columns, |columns| self.plan(columns, &key_names, false))
        {
            apply_plan(key, &plan);
        }
        if let Some(schema) = &event.schema {
            event.schema = Some(self.schemas.get(schema, |schema| self.schema(schema)));
        }
        Ok(Verdict::Keep)
    }
}
