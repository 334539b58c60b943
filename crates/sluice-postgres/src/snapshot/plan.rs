//! What a snapshot reads of one table: its columns as the stream shows
//! them, the key it is read in order of, and the queries.

use std::sync::Arc;

use sluice_core::snapshot::{KeyKind, KeyPart};
use sluice_core::{Columns, SourceError, TableSchema};

use crate::catalog::{event_key, quote_ident, quote_literal, resolve_types, source_error};
use crate::pgoutput::{Column, Relation};
use crate::types::{PgType, builtin, fingerprint, key_index};
use crate::wire::Connection;

pub struct TablePlan {
    /// `schema.table`, as events name it: a partition's root for a partition.
    pub event_name: Arc<str>,
    /// `schema.table` of the table read, which orders the snapshot and
    /// names it in positions: two partitions of one root may hold rows
    /// with keys in any order, so they must not share positions.
    pub read_name: Arc<str>,
    from_sql: String,
    select_list: String,
    pub columns: Columns,
    pub types: Vec<PgType>,
    /// The columns that name a row: the event's key, as the stream gives it.
    pub identity: Vec<usize>,
    pub identity_columns: Columns,
    /// The stream's schema version for this shape of the table.
    pub fingerprint: u32,
    pub order: Order,
    /// The planner's row estimate, for progress.
    pub estimated_rows: u64,
    /// The declared columns, for formats that describe them.
    pub schema: Arc<TableSchema>,
}

/// The order a table is read in, which is the order of its positions.
pub enum Order {
    /// Primary key columns, in key order.
    Key(Vec<KeyColumn>),
    /// No usable primary key: physical order, a range of pages per chunk.
    Ctid { pages: u64, pages_per_chunk: u64 },
}

pub struct KeyColumn {
    pub index: usize,
    pub kind: KeyKind,
    /// Text compared in the `C` collation, so PostgreSQL's order is byte order.
    collate_c: bool,
}

/// The key kind whose byte encoding orders like PostgreSQL's `ORDER BY`
/// (with `COLLATE "C"` for text), or `None` for types read by ctid instead.
fn key_kind(oid: u32) -> Option<(KeyKind, bool)> {
    match oid {
        20 | 21 | 23 => Some((KeyKind::Int, false)),
        18 | 19 | 25 | 1042 | 1043 => Some((KeyKind::Text, true)),
        // uuid: its text form sorts like its bytes.
        2950 => Some((KeyKind::Text, false)),
        17 => Some((KeyKind::Bytes, false)),
        _ => None,
    }
}

fn query_error(e: crate::wire::PgError) -> SourceError {
    source_error("snapshot catalog query", e)
}

/// The plan for one matched table; `None` for a partitioned table, whose
/// rows live in its partitions: the snapshot reads each partition, and
/// names its rows by the partition tree's root, as the stream does.
pub async fn plan_table(
    conn: &mut Connection,
    schema: &str,
    table: &str,
    chunk_size: u64,
) -> Result<Option<TablePlan>, SourceError> {
    let (schema_lit, table_lit) = (quote_literal(schema), quote_literal(table));
    // Generated columns are left out, as pgoutput leaves them out.
    let rows = conn
        .simple_query(&format!(
            "SELECT c.oid AS reloid, a.attname, a.atttypid, a.atttypmod, \
               (c.relreplident = 'f' OR a.attnum = ANY(COALESCE(ri.indkey::int2[], '{{}}'))) AS identity, \
               array_position(pk.indkey::int2[], a.attnum) AS pk_position, c.relreplident, c.relkind \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' \
             LEFT JOIN pg_index pk ON pk.indrelid = c.oid AND pk.indisprimary \
             LEFT JOIN pg_index ri ON ri.indrelid = c.oid \
               AND ((c.relreplident = 'd' AND ri.indisprimary) OR (c.relreplident = 'i' AND ri.indisreplident)) \
             WHERE n.nspname = {schema_lit} AND c.relname = {table_lit} ORDER BY a.attnum"
        ))
        .await
        .map_err(query_error)?;
    if rows.first("relkind") == Some("p") {
        return Ok(None);
    }
    if rows.rows.is_empty() {
        return Err(SourceError::permanent(
            format!("table {schema}.{table} has no columns Sluice can read, or is gone"),
            "check `tables` in the source config",
        ));
    }
    let (event_schema, event_table) = root_of(conn, schema, table).await?;
    let mut relation = Relation {
        oid: 0,
        namespace: event_schema,
        name: event_table,
        replica_identity: rows.first("relreplident").and_then(|r| r.bytes().next()).unwrap_or(b'd'),
        columns: Vec::new(),
    };
    let mut key: Vec<(i64, usize, u32)> = Vec::new();
    let mut identity_index = Vec::new();
    for (index, row) in rows.rows.iter().enumerate() {
        let field = |name: &str| rows.get(row, name).unwrap_or_default();
        let type_oid: u32 = field("atttypid").parse().unwrap_or(0);
        relation.columns.push(Column {
            key: field("identity") == "t",
            name: field("attname").to_string(),
            type_oid,
            type_modifier: field("atttypmod").parse().unwrap_or(-1),
        });
        if let Ok(position) = field("pk_position").parse::<i64>() {
            key.push((position, index, type_oid));
        }
        if field("identity") == "t" {
            identity_index.push(field("attname").to_string());
        }
    }
    key.sort();
    let primary: Vec<String> = key.iter().map(|(_, index, _)| relation.columns[*index].name.clone()).collect();
    let event_key = event_key(relation.replica_identity, primary.clone(), identity_index);
    let unknown: Vec<u32> = relation.columns.iter().map(|c| c.type_oid).filter(|oid| builtin(*oid).is_none()).collect();
    let resolved = resolve_types(conn, &unknown).await?;
    let types: Vec<PgType> = relation
        .columns
        .iter()
        .map(|c| {
            builtin(c.type_oid)
                .or_else(|| resolved.iter().find(|(oid, _)| *oid == c.type_oid).map(|(_, t)| t.clone()))
                .unwrap_or(PgType::Scalar(crate::types::Kind::Text))
        })
        .collect();
    let columns: Columns = relation.columns.iter().map(|c| Arc::from(c.name.as_str())).collect();
    let identity = key_index(&relation, event_key.as_deref());
    let identity_columns: Columns = identity.iter().map(|i| columns[*i].clone()).collect();
    let (order, estimated_rows) = read_order(conn, schema, table, &key, chunk_size).await?;
    let select_list = columns.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ");
    let reloid = rows.first("reloid").and_then(|o| o.parse().ok()).unwrap_or(0);
    let catalog = crate::schema::catalog_columns(conn, reloid).await?;
    let declared = Arc::new(crate::schema::table_schema(&relation, &types, &catalog, &primary));
    Ok(Some(TablePlan {
        schema: declared,
        event_name: format!("{}.{}", relation.namespace, relation.name).into(),
        read_name: format!("{schema}.{table}").into(),
        from_sql: format!("{}.{}", quote_ident(schema), quote_ident(table)),
        select_list,
        fingerprint: fingerprint(&relation),
        columns,
        types,
        identity,
        identity_columns,
        order,
        estimated_rows,
    }))
}

/// The partition tree's root of `schema.table`, whose name its rows
/// carry as the stream gives them; the table itself when not a partition.
async fn root_of(conn: &mut Connection, schema: &str, table: &str) -> Result<(String, String), SourceError> {
    let (schema_lit, table_lit) = (quote_literal(schema), quote_literal(table));
    let root = conn
        .simple_query(&format!(
            "SELECT rn.nspname, r.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_class r ON r.oid = pg_partition_root(c.oid) JOIN pg_namespace rn ON rn.oid = r.relnamespace \
             WHERE n.nspname = {schema_lit} AND c.relname = {table_lit} AND c.relispartition"
        ))
        .await
        .map_err(query_error)?;
    let root_name = root
        .rows
        .first()
        .and_then(|r| Some((r.first()?.clone()?, r.get(1)?.clone()?)))
        .unwrap_or_else(|| (schema.to_string(), table.to_string()));
    Ok(root_name)
}

/// How to read `schema.table` in chunks: by its primary key when every
/// key column has an order Sluice can encode, else by ctid pages; and the
/// server's estimate of its rows.
async fn read_order(
    conn: &mut Connection,
    schema: &str,
    table: &str,
    key: &[(i64, usize, u32)],
    chunk_size: u64,
) -> Result<(Order, u64), SourceError> {
    let (schema_lit, table_lit) = (quote_literal(schema), quote_literal(table));
    let size = conn
        .simple_query(&format!(
            "SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint AS pages, \
               c.reltuples::bigint AS tuples \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = {schema_lit} AND c.relname = {table_lit}"
        ))
        .await
        .map_err(query_error)?;
    let pages: u64 = size.first("pages").and_then(|p| p.parse().ok()).unwrap_or(0);
    // -1: never analyzed.
    let tuples: i64 = size.first("tuples").and_then(|p| p.parse().ok()).unwrap_or(-1);
    let estimated_rows = tuples.max(0) as u64;
    let key_columns: Option<Vec<KeyColumn>> = (!key.is_empty())
        .then(|| {
            key.iter()
                .map(|(_, index, oid)| {
                    key_kind(*oid).map(|(kind, collate_c)| KeyColumn { index: *index, kind, collate_c })
                })
                .collect()
        })
        .flatten();
    let order = match key_columns {
        Some(key) => Order::Key(key),
        None => {
            let rows_per_page = if pages == 0 || tuples < 0 { 100 } else { (estimated_rows / pages).max(1) };
            Order::Ctid { pages, pages_per_chunk: (chunk_size / rows_per_page).max(1) }
        }
    };
    Ok((order, estimated_rows))
}

impl TablePlan {
    pub fn key_kinds(&self) -> Vec<KeyKind> {
        match &self.order {
            Order::Key(key) => key.iter().map(|k| k.kind).collect(),
            Order::Ctid { .. } => vec![KeyKind::Int, KeyKind::Int],
        }
    }

    fn key_expr(&self, key: &[KeyColumn]) -> String {
        key.iter()
            .map(|k| {
                let column = quote_ident(&self.columns[k.index]);
                if k.collate_c { format!("{column} COLLATE \"C\"") } else { column }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The query for the next chunk of a key-ordered table, after `after`.
    pub fn key_chunk_sql(&self, key: &[KeyColumn], after: Option<&[KeyPart]>, limit: u64) -> String {
        let order = self.key_expr(key);
        let filter = match after {
            Some(parts) => format!(" WHERE ({order}) > ({})", parts.iter().map(literal).collect::<Vec<_>>().join(", ")),
            None => String::new(),
        };
        format!("SELECT {} FROM {}{filter} ORDER BY {order} LIMIT {limit}", self.select_list, self.from_sql)
    }

    /// The query for the pages `[first, first + count)` of a table read in
    /// physical order, after the row `after` (block, offset) if given.
    pub fn ctid_chunk_sql(&self, first: u64, count: u64, after: Option<(u64, u64)>) -> String {
        let resume = after.map_or(String::new(), |(block, offset)| format!(" AND ctid > '({block},{offset})'::tid"));
        format!(
            "SELECT ctid, {} FROM {} WHERE ctid >= '({first},0)'::tid AND ctid < '({},0)'::tid{resume} ORDER BY ctid",
            self.select_list,
            self.from_sql,
            first + count
        )
    }
}

/// A key part as an SQL literal the server compares with the column.
fn literal(part: &KeyPart) -> String {
    match part {
        KeyPart::Int(v) => v.to_string(),
        KeyPart::Text(text) => quote_literal(text),
        KeyPart::Bytes(bytes) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("'\\x{hex}'::bytea")
        }
    }
}

/// A key column's text output as a key part; `None` if it does not parse.
pub fn key_part(kind: KeyKind, text: &str) -> Option<KeyPart> {
    Some(match kind {
        KeyKind::Int => KeyPart::Int(text.parse().ok()?),
        KeyKind::Text => KeyPart::Text(text.to_string()),
        KeyKind::Bytes => {
            let hex = text.strip_prefix("\\x")?;
            if !hex.len().is_multiple_of(2) {
                return None;
            }
            let bytes: Option<Vec<u8>> =
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect();
            KeyPart::Bytes(bytes?)
        }
    })
}

/// `(block,offset)` as ctid prints it.
pub fn parse_ctid(text: &str) -> Option<(u64, u64)> {
    let (block, offset) = text.strip_prefix('(')?.strip_suffix(')')?.split_once(',')?;
    Some((block.parse().ok()?, offset.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_text_parses_back_to_the_parts_the_order_uses() {
        assert_eq!(key_part(KeyKind::Int, "-42"), Some(KeyPart::Int(-42)));
        assert_eq!(key_part(KeyKind::Int, "x"), None);
        assert_eq!(key_part(KeyKind::Bytes, "\\x00ff"), Some(KeyPart::Bytes(vec![0, 255])));
        assert_eq!(key_part(KeyKind::Bytes, "\\x0"), None);
        assert_eq!(literal(&KeyPart::Text("it's".into())), "'it''s'");
        assert_eq!(literal(&KeyPart::Bytes(vec![1, 0xab])), "'\\x01ab'::bytea");
        assert_eq!(parse_ctid("(12,7)"), Some((12, 7)));
        assert_eq!(parse_ctid("12,7"), None);
    }
}
