//! The spill encoding of an event's table schema and origin, beside
//! `codec`'s rows and values. A spilled event must come back with
//! everything a typed format needs, so nothing is left to a lookup that a
//! restart would lose.

use std::sync::Arc;

use crate::codec::{CodecError, put_len, put_str, put_value, take_array, take_count, take_str, take_u8, take_value};
use crate::schema::{ColumnSchema, ColumnType, Origin, SnapshotMark, TableSchema};
use crate::tx_place::{TxCounts, TxPlace};

/// Array types nest at most this deep in a decoded schema.
const MAX_TYPE_DEPTH: usize = 8;

pub(crate) fn put_schema(out: &mut Vec<u8>, schema: Option<&TableSchema>) {
    let Some(schema) = schema else {
        out.push(0);
        return;
    };
    out.push(1);
    put_len(out, schema.columns.len());
    for column in &schema.columns {
        put_str(out, &column.name);
        put_str(out, &column.type_name);
        put_type(out, &column.ty);
        out.push(u8::from(column.nullable));
        match &column.default {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                put_value(out, value);
            }
        }
    }
    put_len(out, schema.primary_key.len());
    for index in &schema.primary_key {
        put_len(out, *index);
    }
}

pub(crate) fn take_schema(input: &mut &[u8]) -> Result<Option<TableSchema>, CodecError> {
    if take_flag(input)? == 0 {
        return Ok(None);
    }
    let count = take_count(input, 11)?;
    let mut columns = Vec::with_capacity(count);
    for _ in 0..count {
        let name = Arc::from(take_str(input)?);
        let type_name = Arc::from(take_str(input)?);
        let ty = take_type(input, 0)?;
        let nullable = take_flag(input)? == 1;
        let default = match take_flag(input)? {
            0 => None,
            _ => Some(take_value(input, 0)?),
        };
        columns.push(ColumnSchema { name, type_name, ty, nullable, default });
    }
    let key_count = take_count(input, 4)?;
    let mut primary_key = Vec::with_capacity(key_count);
    for _ in 0..key_count {
        let index = u32::from_le_bytes(take_array(input)?) as usize;
        if index >= columns.len() {
            return Err(CodecError::Invalid("key column out of range"));
        }
        primary_key.push(index);
    }
    Ok(Some(TableSchema { columns, primary_key }))
}

fn put_opt(out: &mut Vec<u8>, value: Option<u32>) {
    match value {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

fn take_opt(input: &mut &[u8]) -> Result<Option<u32>, CodecError> {
    Ok(match take_flag(input)? {
        0 => None,
        _ => Some(u32::from_le_bytes(take_array(input)?)),
    })
}

fn take_flag(input: &mut &[u8]) -> Result<u8, CodecError> {
    match take_u8(input)? {
        flag @ (0 | 1) => Ok(flag),
        _ => Err(CodecError::Invalid("bad flag")),
    }
}

fn put_type(out: &mut Vec<u8>, ty: &ColumnType) {
    let precision = |out: &mut Vec<u8>, tag: u8, p: u32| {
        out.push(tag);
        out.extend_from_slice(&p.to_le_bytes());
    };
    match ty {
        ColumnType::Bool => out.push(0),
        ColumnType::Int16 => out.push(1),
        ColumnType::Int32 => out.push(2),
        ColumnType::Int64 => out.push(3),
        ColumnType::Float32 => out.push(4),
        ColumnType::Float64 => out.push(5),
        ColumnType::Decimal { precision, scale } => {
            out.push(6);
            put_opt(out, *precision);
            put_opt(out, *scale);
        }
        ColumnType::Text { length } => {
            out.push(7);
            put_opt(out, *length);
        }
        ColumnType::Bytes => out.push(8),
        ColumnType::Json => out.push(9),
        ColumnType::Uuid => out.push(10),
        ColumnType::Date => out.push(11),
        ColumnType::Time { precision: p } => precision(out, 12, *p),
        ColumnType::TimeTz { precision: p } => precision(out, 13, *p),
        ColumnType::Timestamp { precision: p } => precision(out, 14, *p),
        ColumnType::TimestampTz { precision: p } => precision(out, 15, *p),
        ColumnType::Interval => out.push(16),
        ColumnType::Enum { labels } => {
            out.push(17);
            put_len(out, labels.len());
            for label in labels {
                put_str(out, label);
            }
        }
        ColumnType::Array(element) => {
            out.push(18);
            put_type(out, element);
        }
        ColumnType::Other => out.push(19),
        ColumnType::Set { labels } => {
            out.push(20);
            put_len(out, labels.len());
            for label in labels {
                put_str(out, label);
            }
        }
        ColumnType::Bits { length } => precision(out, 21, *length),
        ColumnType::Year => out.push(22),
        ColumnType::Xml => out.push(23),
        ColumnType::Money => out.push(24),
    }
}

fn take_type(input: &mut &[u8], depth: usize) -> Result<ColumnType, CodecError> {
    let precision = |input: &mut &[u8]| take_array(input).map(u32::from_le_bytes);
    Ok(match take_u8(input)? {
        0 => ColumnType::Bool,
        1 => ColumnType::Int16,
        2 => ColumnType::Int32,
        3 => ColumnType::Int64,
        4 => ColumnType::Float32,
        5 => ColumnType::Float64,
        6 => ColumnType::Decimal { precision: take_opt(input)?, scale: take_opt(input)? },
        7 => ColumnType::Text { length: take_opt(input)? },
        8 => ColumnType::Bytes,
        9 => ColumnType::Json,
        10 => ColumnType::Uuid,
        11 => ColumnType::Date,
        12 => ColumnType::Time { precision: precision(input)? },
        13 => ColumnType::TimeTz { precision: precision(input)? },
        14 => ColumnType::Timestamp { precision: precision(input)? },
        15 => ColumnType::TimestampTz { precision: precision(input)? },
        16 => ColumnType::Interval,
        17 => ColumnType::Enum { labels: take_labels(input)? },
        18 if depth < MAX_TYPE_DEPTH => ColumnType::Array(Box::new(take_type(input, depth + 1)?)),
        18 => return Err(CodecError::Invalid("array types nested too deep")),
        19 => ColumnType::Other,
        20 => ColumnType::Set { labels: take_labels(input)? },
        21 => ColumnType::Bits { length: precision(input)? },
        22 => ColumnType::Year,
        23 => ColumnType::Xml,
        24 => ColumnType::Money,
        _ => return Err(CodecError::Invalid("unknown column type")),
    })
}

fn take_labels(input: &mut &[u8]) -> Result<Vec<Arc<str>>, CodecError> {
    let count = take_count(input, 4)?;
    let mut labels = Vec::with_capacity(count);
    for _ in 0..count {
        labels.push(Arc::from(take_str(input)?));
    }
    Ok(labels)
}

pub(crate) fn put_origin(out: &mut Vec<u8>, origin: &Origin) {
    match origin {
        Origin::None => out.push(0),
        Origin::Postgres { lsn, last_commit_lsn, tx } => {
            out.push(1);
            out.extend_from_slice(&lsn.to_le_bytes());
            match last_commit_lsn {
                None => out.push(0),
                Some(commit) => {
                    out.push(1);
                    out.extend_from_slice(&commit.to_le_bytes());
                }
            }
            put_tx_place(out, tx.as_ref());
        }
        Origin::Mysql { server_id, file, pos, row, thread, gtid, mariadb, tx } => {
            out.push(2);
            out.push(u8::from(*mariadb));
            out.extend_from_slice(&server_id.to_le_bytes());
            put_str(out, file);
            out.extend_from_slice(&pos.to_le_bytes());
            out.extend_from_slice(&row.to_le_bytes());
            put_opt(out, *thread);
            put_str(out, gtid.as_deref().unwrap_or(""));
            put_tx_place(out, tx.as_ref());
        }
        Origin::Snapshot(mark) => {
            out.push(3);
            out.push(*mark as u8);
        }
    }
}

pub(crate) fn take_origin(input: &mut &[u8]) -> Result<Origin, CodecError> {
    Ok(match take_u8(input)? {
        0 => Origin::None,
        1 => {
            let lsn = u64::from_le_bytes(take_array(input)?);
            let last_commit_lsn = match take_flag(input)? {
                0 => None,
                _ => Some(u64::from_le_bytes(take_array(input)?)),
            };
            Origin::Postgres { lsn, last_commit_lsn, tx: take_tx_place(input)? }
        }
        2 => {
            let mariadb = take_flag(input)? == 1;
            let server_id = u32::from_le_bytes(take_array(input)?);
            let file = Arc::from(take_str(input)?);
            let pos = u64::from_le_bytes(take_array(input)?);
            let row = u32::from_le_bytes(take_array(input)?);
            let thread = take_opt(input)?;
            let gtid = take_str(input)?;
            let gtid = (!gtid.is_empty()).then(|| Arc::from(gtid));
            Origin::Mysql { server_id, file, pos, row, thread, gtid, mariadb, tx: take_tx_place(input)? }
        }
        3 => Origin::Snapshot(match take_u8(input)? {
            0 => SnapshotMark::Row,
            1 => SnapshotMark::FirstInTable,
            2 => SnapshotMark::LastInTable,
            3 => SnapshotMark::First,
            4 => SnapshotMark::Last,
            5 => SnapshotMark::Incremental,
            _ => return Err(CodecError::Invalid("unknown snapshot mark")),
        }),
        _ => return Err(CodecError::Invalid("unknown origin")),
    })
}

fn put_counts(out: &mut Vec<u8>, counts: &TxCounts) {
    for n in [counts.rows, counts.truncates, counts.messages] {
        out.extend_from_slice(&n.to_le_bytes());
    }
}

fn take_counts(input: &mut &[u8]) -> Result<TxCounts, CodecError> {
    let mut next = || take_array(input).map(u32::from_le_bytes);
    Ok(TxCounts { rows: next()?, truncates: next()?, messages: next()? })
}

fn put_tx_place(out: &mut Vec<u8>, place: Option<&TxPlace>) {
    let Some(place) = place else {
        out.push(0);
        return;
    };
    out.push(1);
    put_counts(out, &place.before);
    put_counts(out, &place.table_before);
    match &place.totals {
        None => out.push(0),
        Some(totals) => {
            out.push(1);
            out.extend_from_slice(&(totals.len() as u32).to_le_bytes());
            for (table, counts) in totals.iter() {
                put_str(out, table);
                put_counts(out, counts);
            }
        }
    }
    match place.commit_end {
        None => out.push(0),
        Some(lsn) => {
            out.push(1);
            out.extend_from_slice(&lsn.to_le_bytes());
        }
    }
}

fn take_tx_place(input: &mut &[u8]) -> Result<Option<TxPlace>, CodecError> {
    if take_flag(input)? == 0 {
        return Ok(None);
    }
    let before = take_counts(input)?;
    let table_before = take_counts(input)?;
    let totals = match take_flag(input)? {
        0 => None,
        _ => {
            let count = u32::from_le_bytes(take_array(input)?) as usize;
            let mut totals = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                let table: Arc<str> = Arc::from(take_str(input)?);
                totals.push((table, take_counts(input)?));
            }
            Some(totals.into())
        }
    };
    let commit_end = match take_flag(input)? {
        0 => None,
        _ => Some(u64::from_le_bytes(take_array(input)?)),
    };
    Ok(Some(TxPlace { before, table_before, totals, commit_end }))
}
