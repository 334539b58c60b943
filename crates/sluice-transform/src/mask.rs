//! `mask`: replace the values of columns in the key, the old and the new
//! row. A masked value is text, so the schema says so too: the typed
//! formats (Debezium's, Avro, Parquet) then describe what is written.

use std::sync::Arc;

use sluice_core::{ColumnType, Event, Row, TableSchema, Value};

use crate::config::MaskConfig;
use crate::rows::{Memo, Tables, rows_mut, text};
use crate::{Transform, TransformError, Verdict};

enum With {
    Fixed(String),
    Sha256 { salt: String },
    Truncate(usize),
}

pub(crate) struct Mask {
    tables: Tables,
    columns: Vec<String>,
    with: With,
    schemas: Memo<TableSchema, Arc<TableSchema>>,
}

impl Mask {
    pub fn new(config: &MaskConfig) -> Result<Self, String> {
        if config.columns.is_empty() {
            return Err("columns: name at least one column to mask".into());
        }
        let given = &config.with;
        let with = match (&given.fixed, &given.sha256, given.truncate) {
            (Some(text), None, None) => With::Fixed(text.clone()),
            (None, Some(sha), None) if sha.salt.is_empty() => {
                return Err("with.sha256.salt is empty; give a secret salt, e.g. salt: \"${MASK_SALT}\"".into());
            }
            (None, Some(sha), None) => With::Sha256 { salt: sha.salt.clone() },
            (None, None, Some(chars)) => With::Truncate(chars),
            _ => return Err("with: give exactly one of fixed, sha256, truncate".into()),
        };
        Ok(Self { tables: Tables::new(&config.tables)?, columns: config.columns.clone(), with, schemas: Memo::new() })
    }

    fn masked(&self, value: &str) -> String {
        match &self.with {
            With::Fixed(text) => text.clone(),
            With::Sha256 { salt } => {
                let mut context = ring::digest::Context::new(&ring::digest::SHA256);
                context.update(salt.as_bytes());
                context.update(value.as_bytes());
                // Into a buffer: `hex::encode` goes a character at a time.
                let mut hex = [0; 64];
                let _ = hex::encode_to_slice(context.finish(), &mut hex);
                String::from_utf8_lossy(&hex).into_owned()
            }
            With::Truncate(chars) => value.chars().take(*chars).collect(),
        }
    }

    fn mask_row(&self, row: &mut Row) {
        for (column, value) in row.columns.iter().zip(row.values.iter_mut()) {
            if !self.columns.iter().any(|c| **c == **column) {
                continue;
            }
            // NULL stays NULL, and a value the source did not send stays
            // unsent: neither holds anything to hide.
            if let Some(clear) = text(value) {
                *value = Value::Text(self.masked(&clear).into());
            }
        }
    }

    /// The masked columns `schema` lacks.
    pub(crate) fn missing(&self, schema: &TableSchema) -> Vec<&str> {
        self.columns.iter().filter(|m| schema.column(m).is_none()).map(String::as_str).collect()
    }

    /// `schema` with the masked columns typed as text; said once per table
    /// version: the masked columns it lacks, likely a misspelt name.
    fn schema(&self, table: &str, schema: &TableSchema) -> Arc<TableSchema> {
        let missing = self.missing(schema);
        if !missing.is_empty() {
            tracing::warn!(
                table,
                columns = ?missing,
                "mask: the table has no such column, so nothing of that name is masked in it; check the mask's \
                 columns and tables"
            );
        }
        let mut schema = schema.clone();
        for column in schema.columns.iter_mut().filter(|c| self.columns.iter().any(|m| **m == *c.name)) {
            column.ty = ColumnType::Text { length: None };
            column.type_name = "text".into();
            column.default = None;
        }
        Arc::new(schema)
    }
}

impl Transform for Mask {
    fn apply(&self, event: &mut Event) -> Result<Verdict, TransformError> {
        if !self.tables.matches(&event.table) {
            return Ok(Verdict::Keep);
        }
        for row in rows_mut(event) {
            self.mask_row(row);
        }
        if let Some(schema) = &event.schema {
            event.schema = Some(self.schemas.get(schema, |schema| self.schema(&event.table, schema)));
        }
        Ok(Verdict::Keep)
    }
}
