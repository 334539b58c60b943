//! Row images read straight from a rows event, with one plan of the
//! table's columns per event. `mysql_common`'s own row type describes
//! every column of every row afresh (copying the schema's and table's
//! names, printing `@N` for each column's name) and copies every value out
//! of the event; on a bulk load that was a third of Sluice's CPU.

use std::io;

use mysql_async::Value as MyValue;
use mysql_async::binlog::events::{OptionalMetaExtractor, RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use mysql_common::io::ParseBuf;
use mysql_common::misc::raw::RawInt;
use mysql_common::misc::raw::int::LenEnc;

/// How one column's values are read.
pub(super) struct Column<'t> {
    pub(super) kind: ColumnType,
    pub(super) meta: &'t [u8],
    unsigned: bool,
}

/// A row image: one entry per column of the table, `None` for a column the
/// image leaves out.
pub(super) type Image<'d> = Vec<Option<BinlogValue<'d>>>;

/// Bit `index` of a little-endian bitmap; past its end, `past`.
fn bit(bits: &[u8], index: usize, past: bool) -> bool {
    bits.get(index / 8).map_or(past, |byte| byte >> (index % 8) & 1 == 1)
}

/// The columns of the table `table` maps, as its rows events are read.
pub(super) fn plan<'t>(table: &'t TableMapEvent<'_>) -> io::Result<Vec<Column<'t>>> {
    let optional = OptionalMetaExtractor::new(table.iter_optional_meta())?;
    // Signedness, where the server sends it (MySQL's minimal row
    // metadata), has one bit per numeric column.
    let mut signedness = optional.iter_signedness();
    (0..table.columns_count() as usize)
        .map(|index| {
            let kind = match table.get_column_type(index) {
                Ok(Some(kind)) => kind,
                Ok(None) => return Err(io::Error::new(io::ErrorKind::InvalidData, "a column without a type")),
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            };
            let unsigned = kind.is_numeric_type().then(|| signedness.next()).flatten().unwrap_or_default();
            Ok(Column { kind, meta: table.get_column_metadata(index).unwrap_or(&[]), unsigned })
        })
        .collect()
}

/// Every row's before and after images, in the event's order.
pub(super) fn read<'d>(
    rows: &'d RowsEventData<'_>,
    table: &TableMapEvent<'_>,
    columns: &[Column<'d>],
) -> io::Result<Vec<(Option<Image<'d>>, Option<Image<'d>>)>> {
    // An after image of a partial update starts with the shared image's
    // options (MySQL's PARTIAL_JSON row values).
    let shared = matches!(rows, RowsEventData::PartialUpdateRowsEvent(_));
    let json_columns = table.json_column_count();
    let before = rows.columns_before_image();
    let after = rows.columns_after_image();
    let mut buf = ParseBuf(rows.rows_data());
    let mut images = Vec::new();
    while !buf.is_empty() {
        let old =
            before.map(|present| image(&mut buf, columns, |i| present.get(i).is_some_and(|b| *b), None)).transpose()?;
        let new = match after {
            None => None,
            Some(present) => {
                let partial = if shared { partial_json(&mut buf, json_columns)? } else { None };
                Some(image(&mut buf, columns, |i| present.get(i).is_some_and(|b| *b), partial)?)
            }
        };
        images.push((old, new));
    }
    Ok(images)
}

/// The bitmap of JSON columns whose after image is a diff, if any.
fn partial_json<'d>(buf: &mut ParseBuf<'d>, json_columns: usize) -> io::Result<Option<&'d [u8]>> {
    const PARTIAL_JSON_UPDATES: u64 = 1;
    let options = *buf.parse::<RawInt<LenEnc>>(())?;
    if options & PARTIAL_JSON_UPDATES == 0 {
        return Ok(None);
    }
    buf.parse::<&[u8]>(json_columns.div_ceil(8)).map(Some)
}

fn image<'d>(
    buf: &mut ParseBuf<'d>,
    columns: &[Column<'d>],
    present: impl Fn(usize) -> bool,
    partial: Option<&[u8]>,
) -> io::Result<Image<'d>> {
    let count = (0..columns.len()).filter(|i| present(*i)).count();
    let nulls: &[u8] = buf.parse(count.div_ceil(8))?;
    let mut values = Vec::with_capacity(columns.len());
    let (mut at, mut json_at) = (0, 0);
    for (index, column) in columns.iter().enumerate() {
        // Every JSON column has a bit in the partial map, present or not.
        let is_partial = column.kind == ColumnType::MYSQL_TYPE_JSON && {
            json_at += 1;
            partial.is_some_and(|bits| bit(bits, json_at - 1, false))
        };
        if !present(index) {
            values.push(None);
            continue;
        }
        let null = bit(nulls, at, true);
        at += 1;
        let decimal = match (null, column.kind) {
            (false, ColumnType::MYSQL_TYPE_NEWDECIMAL) => super::decimal::read(buf.0, column.meta),
            _ => None,
        };
        values.push(Some(match (null, decimal) {
            (true, _) => BinlogValue::Value(MyValue::NULL),
            (false, Some((text, size))) => {
                buf.skip(size);
                BinlogValue::Value(MyValue::Bytes(text))
            }
            (false, None) => buf.parse::<BinlogValue<'d>>((column.kind, column.meta, column.unsigned, is_partial))?,
        }));
    }
    Ok(values)
}
