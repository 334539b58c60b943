//! Debezium's transaction metadata (`provide.transaction.metadata`): each
//! change's `transaction` block, and a BEGIN and an END record around the
//! changes of each source transaction. The numbers come from the place the
//! source gave each event in its transaction, so they do not depend on
//! where a sink resumed.

use std::fmt::Write as _;

use sluice_core::{Event, Op, Origin, TxPlace, json};

pub const KEY_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"optional":false,"name":"io.debezium.connector.common.TransactionMetadataKey","version":1}"#;
pub const VALUE_SCHEMA: &str = r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"status"},{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":true,"field":"event_count"},{"type":"array","items":{"type":"struct","fields":[{"type":"string","optional":false,"field":"data_collection"},{"type":"int64","optional":false,"field":"event_count"}],"optional":true,"name":"event.collection","version":1},"optional":true,"field":"data_collections"},{"type":"int64","optional":false,"field":"ts_ms"}],"optional":false,"name":"io.debezium.connector.common.TransactionMetadataValue","version":1}"#;

/// An event's numbers in its transaction, as the format writes it.
#[derive(Debug, Clone, Copy)]
pub struct Order {
    /// Of the transaction's records, from 1.
    pub total: u32,
    /// Of its table's records in the transaction, from 1.
    pub table: u32,
}

/// Which kinds of event the format writes, so the numbers skip the rest.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub truncates: bool,
    pub messages: bool,
}

impl Written {
    pub fn event(&self, event: &Event) -> bool {
        match event.op {
            Op::Schema => false,
            Op::Truncate => self.truncates,
            Op::Message => self.messages,
            _ => true,
        }
    }

    /// The first record of `event`: its order, and whether it opens the
    /// transaction (nothing written before it).
    pub fn order(&self, place: &TxPlace) -> (Order, bool) {
        let before = place.before.written(self.truncates, self.messages);
        let table = place.table_before.written(self.truncates, self.messages);
        (Order { total: before + 1, table: table + 1 }, before == 0)
    }
}

/// The place the source gave an event in its transaction.
pub fn place(event: &Event) -> Option<&TxPlace> {
    match &event.origin {
        Origin::Postgres { tx, .. } | Origin::Mysql { tx, .. } => tx.as_ref(),
        _ => None,
    }
}

/// The transaction id Debezium writes: PostgreSQL's `<txId>:<LSN>`, the
/// LSN of the change at hand (Debezium's offset at that moment); MySQL's
/// and MariaDB's GTID, else the source's transaction id.
pub fn id(event: &Event, lsn: Option<u64>) -> String {
    match &event.origin {
        Origin::Postgres { lsn: own, .. } => format!("{}:{}", event.tx_id, lsn.unwrap_or(*own)),
        Origin::Mysql { gtid: Some(gtid), .. } => gtid.to_string(),
        _ => event.tx_id.to_string(),
    }
}

/// The `transaction` block of a change.
pub fn block<O: super::out::Out>(out: &mut O, id: &str, order: Order) -> Result<(), String> {
    out.begin_struct()?;
    out.key("id")?;
    out.str(id)?;
    out.key("total_order")?;
    out.long(order.total as i64)?;
    out.key("data_collection_order")?;
    out.long(order.table as i64)?;
    out.end_struct()
}

/// The key of a BEGIN or END record.
pub fn key(id: &str) -> String {
    let mut out = String::from("{\"id\":");
    json::push_str(&mut out, id);
    out.push('}');
    out
}

/// A BEGIN record's value; its id is that of the first change.
pub fn begin(event: &Event, id: &str) -> String {
    let mut out = String::from("{\"status\":\"BEGIN\",\"id\":");
    json::push_str(&mut out, id);
    let _ = write!(
        out,
        ",\"event_count\":null,\"data_collections\":null,\"ts_ms\":{}}}",
        event.commit_time_us.div_euclid(1000)
    );
    out
}

/// An END record's value, after the transaction's last event: how many
/// records it wrote in all and per table. PostgreSQL's id carries the LSN
/// where the commit record ends. `None` when the transaction wrote nothing.
pub fn end(event: &Event, place: &TxPlace, written: Written) -> Option<(String, String)> {
    let totals = place.totals.as_deref()?;
    let count: u32 = totals.iter().map(|(_, counts)| counts.written(written.truncates, written.messages)).sum();
    if count == 0 {
        return None;
    }
    let id = id(event, place.commit_end);
    let mut out = String::from("{\"status\":\"END\",\"id\":");
    json::push_str(&mut out, &id);
    let _ = write!(out, ",\"event_count\":{count},\"data_collections\":[");
    let mut collections: Vec<(String, u32)> = totals
        .iter()
        .map(|(table, counts)| (collection(event, table), counts.written(written.truncates, written.messages)))
        .filter(|(_, n)| *n > 0)
        .collect();
    java_hash_map_order(&mut collections);
    for (i, (name, n)) in collections.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"data_collection\":");
        json::push_str(&mut out, name);
        let _ = write!(out, ",\"event_count\":{n}}}");
    }
    let _ = write!(out, "],\"ts_ms\":{}}}", event.commit_time_us.div_euclid(1000));
    Some((id, out))
}

/// A table's name as Debezium's data collections name it.
fn collection(event: &Event, table: &str) -> String {
    match &event.origin {
        Origin::Mysql { .. } if !table.contains('.') => format!("{}.{table}", event.database),
        _ => table.to_string(),
    }
}

/// Puts the collections (in the order they first appeared) in the order
/// Debezium lists them, which is the iteration order of the Java `HashMap`
/// it counts them in: by bucket (the spread `String.hashCode` masked by
/// the table size, 16 doubled while more than three quarters full), and
/// by insertion within a bucket.
fn java_hash_map_order(collections: &mut [(String, u32)]) {
    let mut capacity: u32 = 16;
    while collections.len() as u64 * 4 > u64::from(capacity) * 3 {
        capacity *= 2;
    }
    let bucket = |name: &str| {
        let hash = name.encode_utf16().fold(0u32, |h, unit| h.wrapping_mul(31).wrapping_add(u32::from(unit)));
        (hash ^ (hash >> 16)) & (capacity - 1)
    };
    // A stable sort keeps insertion order within a bucket.
    collections.sort_by_key(|(name, _)| bucket(name));
}

#[cfg(test)]
mod tests {
    fn ordered(names: &[&str]) -> Vec<String> {
        let mut collections: Vec<(String, u32)> = names.iter().map(|n| (n.to_string(), 1)).collect();
        super::java_hash_map_order(&mut collections);
        collections.into_iter().map(|(n, _)| n).collect()
    }

    /// The orders Debezium's MariaDB connector (3.5) and PostgreSQL
    /// connector (3.6) wrote in a comparison run, tables listed as they
    /// first appeared in the transaction.
    #[test]
    fn collections_come_in_java_hash_map_order() {
        let mariadb = ["debezium_golden_my.multi_pk", "debezium_golden_my.all_types", "debezium_golden_my.nokey"];
        assert_eq!(ordered(&mariadb), [mariadb[1], mariadb[2], mariadb[0]]);
        assert_eq!(ordered(&["public.full_ident", "public.all_types"]), ["public.full_ident", "public.all_types"]);
    }
}
