//! Object keys: `<prefix>/table=<table>/date=<yyyy-mm-dd>/<first>_<last>_<sink id>.<ext>`.
//!
//! `<first>` and `<last>` are the sort keys of the first and last position
//! the file holds: fixed-width, so names sort in stream order, and free of
//! `_`, so a name splits back unambiguously.
//!
//! Beside each file, its claim: `_<first>_<sink id>.claim`, created only
//! if absent, whose body is the file's name. The leading `_` hides it from
//! readers that follow Hive's convention (Spark, Hive, pyarrow datasets).

use sluice_core::time::format_utc_micros;

/// The partition folder of an event.
pub(super) fn partition(prefix: &str, table: &str, commit_time_us: i64) -> String {
    let date = &format_utc_micros(commit_time_us)[..10];
    let mut dir = String::new();
    if !prefix.is_empty() {
        dir.push_str(prefix.trim_end_matches('/'));
        dir.push('/');
    }
    dir.push_str("table=");
    escape(table, &mut dir);
    dir.push_str("/date=");
    dir.push_str(date);
    dir
}

/// Hive-style escaping: anything but `A-Z a-z 0-9 . _ -` becomes `%XX`.
fn escape(value: &str, out: &mut String) {
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"._-".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

pub(super) fn file_name(first: &str, last: &str, sink: &str, extension: &str) -> String {
    format!("{first}_{last}_{sink}.{extension}")
}

pub(super) fn claim_name(first: &str, sink: &str) -> String {
    format!("_{first}_{sink}.claim")
}

/// The first sort key of a claim of sink `sink`.
pub(super) fn parse_claim<'a>(name: &'a str, sink: &str) -> Option<&'a str> {
    let (first, rest) = name.strip_prefix('_')?.split_once('_')?;
    let sort_key = first.len() > 1 && first.bytes().all(|b| b.is_ascii_alphanumeric());
    (sort_key && rest.strip_suffix(".claim")? == sink).then_some(first)
}

/// The first and last sort keys of a file of sink `sink`; `None` for any
/// other name (another sink's files, temporary files).
pub(super) fn parse<'a>(name: &'a str, sink: &str) -> Option<(&'a str, &'a str)> {
    let (first, rest) = name.split_once('_')?;
    let (last, rest) = rest.split_once('_')?;
    let extension = rest.strip_prefix(sink)?.strip_prefix('.')?;
    let sort_key = |k: &str| k.len() > 1 && k.bytes().all(|b| b.is_ascii_alphanumeric());
    let known = ["parquet", "jsonl", "jsonl.gz", "jsonl.zst", "avro"].contains(&extension);
    (known && sort_key(first) && sort_key(last) && first.len() == last.len()).then_some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_other_sinks_are_ignored() {
        let name = file_name("g0001", "g0009", "lake_1", "jsonl.gz");
        assert_eq!(name, "g0001_g0009_lake_1.jsonl.gz");
        assert_eq!(parse(&name, "lake_1"), Some(("g0001", "g0009")));
        assert_eq!(parse(&name, "lake"), None);
        assert_eq!(parse("g0001_g0009_lake_1.jsonl.tmp", "lake_1"), None);
        assert_eq!(parse("g0001_g09_lake_1.parquet", "lake_1"), None);
        assert_eq!(parse(&claim_name("g0001", "lake_1"), "lake_1"), None);
        assert_eq!(parse("g0001_g0009_lake.avro", "lake"), Some(("g0001", "g0009")));
    }

    #[test]
    fn claims_round_trip_and_other_sinks_claims_are_ignored() {
        let name = claim_name("g0001", "lake_1");
        assert_eq!(name, "_g0001_lake_1.claim");
        assert_eq!(parse_claim(&name, "lake_1"), Some("g0001"));
        assert_eq!(parse_claim(&name, "lake"), None);
        assert_eq!(parse_claim("g0001_g0009_lake_1.parquet", "lake_1"), None);
    }

    #[test]
    fn partitions_are_hive_style_by_utc_date() {
        assert_eq!(partition("cdc/", "public.orders", 0), "cdc/table=public.orders/date=1970-01-01");
        assert_eq!(partition("", "a b/c=d", 86_400_000_000), "table=a%20b%2Fc%3Dd/date=1970-01-02");
    }
}
