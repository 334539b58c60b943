//! What the database sinks (`postgres`, `mysql`) share: their modes, the
//! column filter, target name templates, and the plan that turns events
//! into set statements.

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod apply;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod plan;

use serde::Deserialize;
use sluice_core::settings::Invalid;

/// What the sink does with each change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyMode {
    /// The target table mirrors the source table by key.
    #[default]
    Apply,
    /// Every change appended as a row, keyed by its event id.
    Changelog,
}

/// What the sink does when a source table's columns change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaEvolution {
    /// Add new columns and widen columns whose type grew; stop on anything else.
    #[default]
    AddColumns,
    /// Change nothing; stop when an event has a column the target lacks.
    None,
}

/// Which columns reach the target. A name is a column of every table
/// (`ssn`) or of one table (`public.users.ssn`, the table as events name it).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnFilter {
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
}

impl ColumnFilter {
    /// Whether `column` of `table` is written.
    pub fn keeps(&self, table: &str, column: &str) -> bool {
        let names = |list: &[String]| {
            list.iter().any(|name| match name.rsplit_once('.') {
                Some((t, c)) => t == table && c == column,
                None => name == column,
            })
        };
        (self.include.is_empty() || names(&self.include)) && !names(&self.exclude)
    }
}

/// A name template of a database sink: `${schema}`, `${db}` and `${table}` only.
pub fn check_name_template(at: &str, field: &str, template: &str) -> Result<(), Invalid> {
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(Invalid::new(format!("{at}.{field}"), "`${` without a closing `}`", "close the placeholder"));
        };
        if !matches!(&after[..end], "schema" | "db" | "table") {
            return Err(Invalid::new(
                format!("{at}.{field}"),
                format!("unknown placeholder ${{{}}}", &after[..end]),
                "use ${schema}, ${db} or ${table}",
            ));
        }
        rest = &after[end + 1..];
    }
    if template.is_empty() {
        return Err(Invalid::new(format!("{at}.{field}"), "is empty", "name a schema or table, or leave it out"));
    }
    Ok(())
}

/// `(schema, table)` of `event`'s target under the `schema` and `table`
/// templates: `${schema}` is the source table's schema, or its database
/// where the source has no schemas (MySQL). A routed event's destination
/// stands in for its table.
pub fn target_name(schema_template: &str, table_template: &str, event: &sluice_core::Event) -> (String, String) {
    let destination = event.destination();
    let (schema, table) = match destination.split_once('.') {
        Some((schema, table)) => (schema, table),
        None => (&*event.database, destination),
    };
    let fill = |template: &str| {
        template.replace("${schema}", schema).replace("${db}", &event.database).replace("${table}", table)
    };
    (fill(schema_template), fill(table_template))
}

/// Each declared key names at least one column.
pub fn check_keys(at: &str, keys: &std::collections::BTreeMap<String, Vec<String>>) -> Result<(), Invalid> {
    match keys.iter().find(|(_, key)| key.is_empty()) {
        Some((table, _)) => {
            Err(Invalid::new(format!("{at}.keys.{table}"), "names no column", "list the columns that identify a row"))
        }
        None => Ok(()),
    }
}

/// The key columns of `event`'s table: declared in `keys`, else the
/// source's primary key; none in changelog mode. The error is the
/// problem and its fix.
pub fn key_of(
    keys: &std::collections::BTreeMap<String, Vec<String>>,
    mode: ApplyMode,
    filter: &ColumnFilter,
    event: &sluice_core::Event,
) -> Result<Vec<std::sync::Arc<str>>, (String, String)> {
    use std::sync::Arc;
    if mode == ApplyMode::Changelog {
        return Ok(Vec::new());
    }
    if let Some(key) = keys.get(&*event.table) {
        return Ok(key.iter().map(|c| Arc::from(c.as_str())).collect());
    }
    let declared: Vec<Arc<str>> = match &event.schema {
        Some(schema) => {
            schema.primary_key.iter().filter_map(|&i| schema.columns.get(i)).map(|c| c.name.clone()).collect()
        }
        None => event.key.iter().flat_map(|k| k.columns.iter().cloned()).collect(),
    };
    if declared.is_empty() {
        return Err((
            format!("table {} has no primary key, so apply mode cannot tell its rows apart", event.table),
            format!("declare its key under keys: {{ {}: [columns] }}, or use mode: changelog", event.table),
        ));
    }
    if let Some(column) = declared.iter().find(|c| !filter.keeps(&event.table, c)) {
        return Err((
            format!("key column {column} of table {} is left out by the columns filter", event.table),
            "keep every key column in apply mode".to_string(),
        ));
    }
    Ok(declared)
}

/// The settings both database sinks share, as written.
pub struct Common<'a> {
    pub host: &'a str,
    /// Whether the TLS mode checks the certificate, which needs `ca_file`.
    pub verifies: bool,
    pub has_ca_file: bool,
    pub schema: &'a str,
    pub table: &'a str,
    pub checkpoint_schema: &'a str,
    pub keys: &'a std::collections::BTreeMap<String, Vec<String>>,
    pub connect_timeout_secs: u64,
}

/// The checks both database sinks' configs share.
pub fn check_common(at: &str, c: Common<'_>) -> Result<(), Invalid> {
    if c.host.is_empty() {
        return Err(Invalid::new(format!("{at}.host"), "is empty", "name the target server"));
    }
    if c.verifies && !c.has_ca_file {
        return Err(Invalid::new(
            format!("{at}.ca_file"),
            "is required when ssl_mode checks the server's certificate",
            "give the PEM file of the CA that signed the server's certificate",
        ));
    }
    check_name_template(at, "schema", c.schema)?;
    check_name_template(at, "table", c.table)?;
    sluice_core::settings::check_id(&format!("{at}.checkpoint_schema"), c.checkpoint_schema)?;
    check_keys(at, c.keys)?;
    sluice_core::settings::check_seconds(at, "connect_timeout_secs", c.connect_timeout_secs, 600)
}

/// The fence a database sink checks in each batch's transaction, with its
/// position row locked: `stored` is what the row holds, `held` what this
/// sink believes it wrote last. Another writer moved the row past it (in a
/// fleet, an instance that took the pipeline over, or one that lost it and
/// has not noticed yet): the batch must write nothing, and the sink read
/// its position again.
pub fn fence(
    kind: &str,
    id: &str,
    table: &str,
    stored: Option<&sluice_core::Position>,
    held: Option<&sluice_core::Position>,
) -> Result<(), sluice_core::SinkError> {
    if stored <= held {
        return Ok(());
    }
    Err(sluice_core::SinkError::transient(format!(
        "{kind} sink {id:?}: another writer moved this sink's position in {table} to {}, past {}, which this one holds (in a fleet, an instance that took the pipeline over, or one that lost it and has not noticed yet); nothing of this batch was written, and the sink reads its position again",
        sluice_core::or_start(stored),
        sluice_core::or_start(held)
    )))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use sluice_core::{ColumnSchema, ColumnType, Event, Op, Origin, Position, TableSchema};

    use super::*;

    #[test]
    fn the_fence_lets_a_batch_through_only_while_no_other_writer_moved_the_position() {
        let at = |tx| Position::Generator { tx, seq: 0 };
        assert!(fence("postgres", "t", "s.sluice_checkpoints", Some(&at(2)), Some(&at(2))).is_ok());
        assert!(fence("postgres", "t", "s.sluice_checkpoints", None, Some(&at(2))).is_ok());
        let moved = fence("mysql", "t", "s.sluice_checkpoints", Some(&at(3)), Some(&at(2))).unwrap_err().to_string();
        assert!(moved.contains("mysql sink \"t\"") && moved.contains("another writer"), "{moved}");
        assert!(fence("mysql", "t", "s.sluice_checkpoints", Some(&at(1)), None).is_err());
    }

    fn event(primary_key: Vec<usize>) -> Event {
        let column = |name: &str| ColumnSchema {
            name: Arc::from(name),
            type_name: "int4".into(),
            ty: ColumnType::Int32,
            nullable: true,
            default: None,
        };
        Event {
            op: Op::Insert,
            source_id: "s".into(),
            database: "shop".into(),
            table: "public.events".into(),
            key: None,
            before: None,
            after: None,
            schema_version: 1,
            position: Position::Generator { tx: 1, seq: 0 },
            tx_id: "1".into(),
            tx_end: true,
            commit_time_us: 0,
            schema: Some(Arc::new(TableSchema { columns: vec![column("id"), column("at")], primary_key })),
            origin: Origin::None,
            route: None,
            shape: Default::default(),
        }
    }

    #[test]
    fn filters_name_columns_of_every_table_or_of_one() {
        let filter = ColumnFilter { include: vec![], exclude: vec!["ssn".into(), "public.users.pw".into()] };
        assert!(!filter.keeps("public.orders", "ssn"));
        assert!(!filter.keeps("public.users", "pw"));
        assert!(filter.keeps("public.orders", "pw"));
        let only = ColumnFilter { include: vec!["id".into(), "public.users.name".into()], exclude: vec![] };
        assert!(only.keeps("public.orders", "id") && only.keeps("public.users", "name"));
        assert!(!only.keeps("public.orders", "name"));
    }

    #[test]
    fn keys_come_from_the_config_then_the_source_and_a_keyless_table_is_refused() {
        let none = ColumnFilter::default();
        let mut keys = BTreeMap::new();
        assert_eq!(key_of(&keys, ApplyMode::Apply, &none, &event(vec![0])).unwrap(), vec![Arc::from("id")]);
        let (problem, hint) = key_of(&keys, ApplyMode::Apply, &none, &event(vec![])).unwrap_err();
        assert!(problem.contains("public.events has no primary key") && hint.contains("keys:"), "{problem}; {hint}");
        assert!(key_of(&keys, ApplyMode::Changelog, &none, &event(vec![])).unwrap().is_empty());
        keys.insert("public.events".to_string(), vec!["id".to_string(), "at".to_string()]);
        let declared = key_of(&keys, ApplyMode::Apply, &none, &event(vec![])).unwrap();
        assert_eq!(declared, vec![Arc::from("id"), Arc::from("at")]);
        let dropped = ColumnFilter { include: vec![], exclude: vec!["id".into()] };
        let (problem, _) = key_of(&BTreeMap::new(), ApplyMode::Apply, &dropped, &event(vec![0])).unwrap_err();
        assert!(problem.contains("key column id"), "{problem}");
    }

    #[test]
    fn target_names_fill_schema_db_and_table() {
        let pg = event(vec![0]);
        assert_eq!(target_name("${schema}", "${table}", &pg), ("public".to_string(), "events".to_string()));
        assert_eq!(
            target_name("mirror_${db}", "${schema}_${table}", &pg),
            ("mirror_shop".into(), "public_events".into())
        );
        let mut my = event(vec![0]);
        my.table = "orders".into();
        assert_eq!(target_name("${schema}", "${table}", &my), ("shop".to_string(), "orders".to_string()));
    }
}
