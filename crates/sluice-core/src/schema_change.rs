//! Schema-change events as data: a table's column list after the change,
//! and what changed, so a consumer can evolve without parsing SQL.
//!
//! The changes are derived from the column lists before and after, by
//! place: a column the new list lacks is dropped and one the old lacked is
//! added, except that an old and a new column in the same place (between
//! the same surviving columns) with the same type are one column renamed.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::schema::{ColumnSchema, ColumnType, TableSchema};
use crate::value::{Columns, JsonText, Row, Value};

/// One column as a schema-change event lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnEntry {
    pub name: String,
    /// The declared type as the database writes it (`varchar(20)`,
    /// `numeric(12,2)`, `int unsigned`).
    #[serde(rename = "type")]
    pub type_name: String,
    pub nullable: bool,
    /// Part of the primary key (or the columns that name a row).
    pub key: bool,
}

impl ColumnEntry {
    /// The columns of a table schema, in order.
    pub fn list(schema: &TableSchema) -> Vec<ColumnEntry> {
        let entry = |(index, column): (usize, &ColumnSchema)| ColumnEntry {
            name: column.name.to_string(),
            type_name: declared(column),
            nullable: column.nullable,
            key: schema.primary_key.contains(&index),
        };
        schema.columns.iter().enumerate().map(entry).collect()
    }
}

/// The type with its modifiers, from what a source decoded of it.
fn declared(column: &ColumnSchema) -> String {
    let name = &column.type_name;
    match &column.ty {
        ColumnType::Decimal { precision: Some(p), scale: Some(s) } => format!("{name}({p},{s})"),
        ColumnType::Text { length: Some(n) } | ColumnType::Bits { length: n } => format!("{name}({n})"),
        ColumnType::Time { precision: p }
        | ColumnType::TimeTz { precision: p }
        | ColumnType::Timestamp { precision: p }
        | ColumnType::TimestampTz { precision: p }
            if *p != 6 =>
        {
            format!("{name}({p})")
        }
        _ => name.to_string(),
    }
}

/// One difference between two column lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "lowercase")]
pub enum Change {
    Added { column: String },
    Dropped { column: String },
    Renamed { column: String, from: String },
    Retyped { column: String, from: String, to: String },
}

/// What turned `old` into `new` (`old` is `None` for a table not there before).
pub fn diff(old: Option<&[ColumnEntry]>, new: &[ColumnEntry]) -> Vec<Change> {
    let old = old.unwrap_or_default();
    let in_list = |list: &[ColumnEntry], name: &str| list.iter().any(|c| c.name == name);
    let mut changes = Vec::new();
    for column in old {
        if let Some(now) = new.iter().find(|c| c.name == column.name)
            && now.type_name != column.type_name
        {
            let (from, to) = (column.type_name.clone(), now.type_name.clone());
            changes.push(Change::Retyped { column: column.name.clone(), from, to });
        }
    }
    // The surviving column before each unmatched one is its place.
    let place = |list: &[ColumnEntry], other: &[ColumnEntry], index: usize| {
        list[..index].iter().rev().find(|c| in_list(other, &c.name)).map(|c| c.name.clone())
    };
    let gone: Vec<usize> = (0..old.len()).filter(|i| !in_list(new, &old[*i].name)).collect();
    let mut came: Vec<usize> = (0..new.len()).filter(|j| !in_list(old, &new[*j].name)).collect();
    for i in gone {
        let at = place(old, new, i);
        let twin = came.iter().position(|j| place(new, old, *j) == at && new[*j].type_name == old[i].type_name);
        match twin {
            Some(k) => {
                let j = came.remove(k);
                changes.push(Change::Renamed { column: new[j].name.clone(), from: old[i].name.clone() });
            }
            None => changes.push(Change::Dropped { column: old[i].name.clone() }),
        }
    }
    changes.extend(came.into_iter().map(|j| Change::Added { column: new[j].name.clone() }));
    changes
}

/// What a source knows of a table's columns before a change.
#[derive(Debug, Clone, Copy)]
pub enum Before<'a> {
    /// The table was not there.
    Absent,
    /// These columns.
    Columns(&'a [ColumnEntry]),
    /// The source never saw the table before the change.
    Unknown,
}

/// The row a schema-change event carries: the database, the statement
/// where the source has one (already redacted), the columns after the
/// change (`null` for a dropped table) and the changes (`null` when the
/// columns before are unknown).
pub fn change_row(database: &str, ddl: Option<String>, old: Before<'_>, new: Option<&[ColumnEntry]>) -> Row {
    let names = ["database", "ddl", "columns", "changes"];
    let columns: Columns = names.iter().map(|c| Arc::from(*c)).collect();
    let json = |value: serde_json::Value| Value::Json(JsonText::of(&value));
    let changes = match (old, new) {
        (Before::Unknown, _) => None,
        (Before::Absent, Some(new)) => Some(diff(None, new)),
        (Before::Columns(old), Some(new)) => Some(diff(Some(old), new)),
        (Before::Columns(old), None) => Some(old.iter().map(|c| Change::Dropped { column: c.name.clone() }).collect()),
        (Before::Absent, None) => Some(Vec::new()),
    };
    let values = vec![
        Value::Text(database.into()),
        ddl.map_or(Value::Null, |ddl| Value::Text(ddl.into())),
        new.map_or(Value::Null, |list| json(serde_json::json!(list))),
        changes.map_or(Value::Null, |changes| json(serde_json::json!(changes))),
    ];
    Row { columns, values }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(columns: &[(&str, &str)]) -> Vec<ColumnEntry> {
        let entry = |(name, ty): &(&str, &str)| ColumnEntry {
            name: name.to_string(),
            type_name: ty.to_string(),
            nullable: true,
            key: *name == "id",
        };
        columns.iter().map(entry).collect()
    }

    fn changes(old: &[(&str, &str)], new: &[(&str, &str)]) -> Vec<Change> {
        diff(Some(&list(old)), &list(new))
    }

    #[test]
    fn a_column_in_the_same_place_with_the_same_type_is_renamed() {
        let old = [("id", "int4"), ("name", "text"), ("age", "int4")];
        let renamed = changes(&old, &[("id", "int4"), ("full_name", "text"), ("age", "int4")]);
        assert_eq!(renamed, [Change::Renamed { column: "full_name".into(), from: "name".into() }]);
        // Another type in that place is another column.
        let replaced = changes(&old, &[("id", "int4"), ("note", "jsonb"), ("age", "int4")]);
        assert_eq!(replaced, [Change::Dropped { column: "name".into() }, Change::Added { column: "note".into() }]);
    }

    #[test]
    fn drops_adds_and_retypes_are_told_apart() {
        let old = [("id", "int4"), ("a", "text"), ("b", "varchar(10)")];
        let new = [("id", "int8"), ("b", "varchar(20)"), ("c", "text")];
        assert_eq!(
            changes(&old, &new),
            [
                Change::Retyped { column: "id".into(), from: "int4".into(), to: "int8".into() },
                Change::Retyped { column: "b".into(), from: "varchar(10)".into(), to: "varchar(20)".into() },
                Change::Dropped { column: "a".into() },
                Change::Added { column: "c".into() },
            ]
        );
    }

    #[test]
    fn a_new_table_adds_every_column_and_a_dropped_one_has_no_column_list() {
        let new = list(&[("id", "int4"), ("a", "text")]);
        assert_eq!(diff(None, &new).len(), 2);
        let row = change_row("shop", None, Before::Columns(&new), None);
        assert_eq!(row.values[2], Value::Null);
        let changes: serde_json::Value = serde_json::from_str(row.values[3].text().as_ref()).unwrap();
        assert_eq!(
            changes,
            serde_json::json!([{"change": "dropped", "column": "id"}, {"change": "dropped", "column": "a"}])
        );
        let unknown = change_row("shop", None, Before::Unknown, Some(&new));
        assert_eq!((&unknown.values[3], unknown.values[2] != Value::Null), (&Value::Null, true));
    }
}
