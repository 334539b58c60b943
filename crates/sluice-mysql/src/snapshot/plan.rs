//! What a snapshot reads of one table: its columns as the stream shows
//! them, the primary key it is read in order of, and the queries.

use std::sync::Arc;

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use sluice_config::glob_match;
use sluice_core::snapshot::SnapshotTable;
use sluice_core::{Columns, SourceError};

use crate::errors::mysql_error;
use crate::schema::{ColumnInfo, TableSchema, read_schema, schema_fingerprint};
use crate::text_values::TextKind;

pub struct TablePlan {
    /// `database.table`, as events name it.
    pub name: Arc<str>,
    pub database: Arc<str>,
    from_sql: String,
    select_list: String,
    pub schema: TableSchema,
    /// How each column's text becomes a value.
    pub kinds: Vec<TextKind>,
    /// The columns as formats see them.
    pub declared: Arc<sluice_core::TableSchema>,
    pub columns: Columns,
    /// The primary key columns in table order: the event's key, as the stream gives it.
    pub identity: Vec<usize>,
    pub identity_columns: Columns,
    /// The primary key columns in key order; empty for a table without one.
    pub order: Vec<usize>,
    pub fingerprint: u32,
    pub estimated_rows: u64,
}

impl SnapshotTable for TablePlan {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn estimated_rows(&self) -> u64 {
        self.estimated_rows
    }
}

fn query_error(e: mysql_async::Error) -> SourceError {
    mysql_error("snapshot catalog query", e)
}

/// The base tables the patterns match, with the server's row estimates.
async fn matching(conn: &mut Conn, patterns: &[String]) -> Result<Vec<(String, String, u64)>, SourceError> {
    let tables: Vec<(String, String, Option<u64>)> = conn
        .query(
            "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES \
             WHERE TABLE_TYPE = 'BASE TABLE' \
             AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')",
        )
        .await
        .map_err(query_error)?;
    let mut matched: Vec<(String, String, u64)> = tables
        .into_iter()
        .filter(|(database, table, _)| patterns.iter().any(|p| glob_match(p, &format!("{database}.{table}"))))
        .map(|(database, table, estimate)| (database, table, estimate.unwrap_or(0)))
        .collect();
    matched.sort();
    Ok(matched)
}

/// `database.table` of each base table the patterns match, in name order.
pub async fn table_names(conn: &mut Conn, patterns: &[String]) -> Result<Vec<String>, SourceError> {
    Ok(matching(conn, patterns).await?.into_iter().map(|(database, table, _)| format!("{database}.{table}")).collect())
}

/// Plans for the base tables the patterns match, in name order.
pub async fn plan_tables(conn: &mut Conn, patterns: &[String]) -> Result<Vec<TablePlan>, SourceError> {
    let mut plans = Vec::new();
    for (database, table, estimate) in matching(conn, patterns).await? {
        plans.extend(plan_table(conn, &database, &table, estimate).await?);
    }
    plans.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(plans)
}

/// The plan for `database.table`; `None` when it does not exist.
pub async fn plan_table(
    conn: &mut Conn,
    database: &str,
    table: &str,
    estimated_rows: u64,
) -> Result<Option<TablePlan>, SourceError> {
    let Some(schema) = read_schema(conn, database, table).await? else { return Ok(None) };
    // The schema read records each column's place in the primary key.
    let mut keyed: Vec<(u32, usize)> =
        schema.columns.iter().enumerate().filter_map(|(i, c)| Some((c.key_order?, i))).collect();
    keyed.sort_unstable();
    let order = keyed.into_iter().map(|(_, i)| i).collect();
    Ok(Some(TablePlan::new(database.to_string(), table.to_string(), schema, order, estimated_rows)))
}

pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

impl TablePlan {
    fn new(database: String, table: String, schema: TableSchema, order: Vec<usize>, estimated_rows: u64) -> Self {
        let columns: Columns = schema.columns.iter().map(|c| Arc::from(c.name.as_str())).collect();
        let identity: Vec<usize> = schema.columns.iter().enumerate().filter(|(_, c)| c.key).map(|(i, _)| i).collect();
        let identity_columns = identity.iter().map(|i| columns[*i].clone()).collect();
        let select_list = schema.columns.iter().map(|c| quote_ident(&c.name)).collect::<Vec<_>>().join(", ");
        Self {
            name: format!("{database}.{table}").into(),
            from_sql: format!("{}.{}", quote_ident(&database), quote_ident(&table)),
            database: database.into(),
            select_list,
            fingerprint: schema_fingerprint(&schema),
            declared: Arc::new(crate::declared::table_schema(&schema)),
            kinds: schema.columns.iter().map(TextKind::of).collect(),
            schema,
            columns,
            identity,
            identity_columns,
            order,
            estimated_rows,
        }
    }

    /// The next `limit` rows in key order after the key `after` (its
    /// columns' values as the server wrote them).
    pub fn chunk_sql(&self, after: Option<&[Vec<u8>]>, limit: u64) -> String {
        let keys: Vec<String> = self.order.iter().map(|i| quote_ident(&self.schema.columns[*i].name)).collect();
        let mut sql = format!("SELECT {} FROM {}", self.select_list, self.from_sql);
        if let Some(after) = after {
            // (a, b) > (x, y) spelled out: a > x OR (a = x AND b > y), which
            // every server turns into an index range.
            let literals: Vec<String> =
                self.order.iter().zip(after).map(|(i, v)| literal(v, &self.schema.columns[*i])).collect();
            let mut terms = Vec::new();
            for last in 0..keys.len() {
                let mut term: Vec<String> = (0..last).map(|j| format!("{} = {}", keys[j], literals[j])).collect();
                term.push(format!("{} > {}", keys[last], literals[last]));
                terms.push(format!("({})", term.join(" AND ")));
            }
            sql.push_str(&format!(" WHERE {}", terms.join(" OR ")));
        }
        sql.push_str(&format!(" ORDER BY {} LIMIT {limit}", keys.join(", ")));
        sql
    }

    /// The primary key values of a row as the server wrote them; `None`
    /// when one is NULL or not text (it never is for a key read as text).
    pub fn key_of(&self, values: &[mysql_async::Value]) -> Option<Vec<Vec<u8>>> {
        self.order
            .iter()
            .map(|i| match values.get(*i) {
                Some(mysql_async::Value::Bytes(bytes)) => Some(bytes.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every row, for a table without a primary key.
    pub fn whole_sql(&self) -> String {
        format!("SELECT {} FROM {}", self.select_list, self.from_sql)
    }
}

/// A key value as SQL: numbers bare (a quoted number would be compared as
/// a double, losing precision past 2^53), binary strings as hex, and the
/// rest as escaped strings, compared in the column's own collation.
fn literal(value: &[u8], column: &ColumnInfo) -> String {
    let numeric = matches!(
        column.data_type.as_str(),
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" | "decimal" | "float" | "double"
    );
    if numeric && !value.is_empty() && value.iter().all(|b| b.is_ascii_digit() || b"-+.eE".contains(b)) {
        return String::from_utf8_lossy(value).into_owned();
    }
    if column.charset.is_none() {
        let hex: String = value.iter().map(|b| format!("{b:02X}")).collect();
        return format!("X'{hex}'");
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in String::from_utf8_lossy(value).chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, data_type: &str, charset: Option<&str>) -> ColumnInfo {
        ColumnInfo {
            name: name.into(),
            data_type: data_type.into(),
            unsigned: false,
            labels: vec![],
            charset: charset.map(str::to_string),
            json: false,
            key: true,
            fixed_length: None,
            ..Default::default()
        }
    }

    #[test]
    fn chunks_continue_after_the_last_key_in_key_order() {
        let schema = TableSchema {
            columns: vec![
                column("note", "varchar", Some("utf8mb4")),
                column("id", "bigint", None),
                column("b", "varbinary", None),
            ],
        };
        let plan = TablePlan::new("shop".into(), "or`ders".into(), schema, vec![1, 0, 2], 10);
        assert_eq!(&*plan.name, "shop.or`ders");
        assert_eq!(
            plan.chunk_sql(None, 5),
            "SELECT `note`, `id`, `b` FROM `shop`.`or``ders` ORDER BY `id`, `note`, `b` LIMIT 5"
        );
        let after = [b"-12".to_vec(), b"it's \\ ok".to_vec(), vec![0, 0xFF]];
        assert_eq!(
            plan.chunk_sql(Some(&after), 5),
            "SELECT `note`, `id`, `b` FROM `shop`.`or``ders` WHERE (`id` > -12) OR (`id` = -12 AND `note` > 'it''s \\\\ ok') \
             OR (`id` = -12 AND `note` = 'it''s \\\\ ok' AND `b` > X'00FF') ORDER BY `id`, `note`, `b` LIMIT 5"
        );
    }

    #[test]
    fn a_number_that_is_not_one_is_quoted() {
        assert_eq!(literal(b"1 OR 1=1", &column("id", "int", None)), "X'31204F5220313D31'");
        assert_eq!(literal(b"18446744073709551615", &column("id", "bigint", None)), "18446744073709551615");
    }
}
