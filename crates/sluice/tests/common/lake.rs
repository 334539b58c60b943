//! Reading back what the object storage sink wrote: files under a prefix
//! of the test S3 server or a local folder, and the events in them.

use std::io::Read;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use object_store::ObjectStore;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// The sink config fields that reach the test S3 server.
pub fn s3_target() -> String {
    format!(
        "bucket: {}, endpoint: \"{}\", path_style: true, access_key_id: {}, secret_access_key: {}",
        super::env("SLUICE_TEST_S3_BUCKET"),
        super::env("SLUICE_TEST_S3_ENDPOINT"),
        super::env("SLUICE_TEST_S3_ACCESS_KEY"),
        super::env("SLUICE_TEST_S3_SECRET_KEY")
    )
}

fn store() -> AmazonS3 {
    AmazonS3Builder::new()
        .with_bucket_name(super::env("SLUICE_TEST_S3_BUCKET"))
        .with_endpoint(super::env("SLUICE_TEST_S3_ENDPOINT"))
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(super::env("SLUICE_TEST_S3_ACCESS_KEY"))
        .with_secret_access_key(super::env("SLUICE_TEST_S3_SECRET_KEY"))
        .build()
        .unwrap()
}

/// Every object under `prefix` on the test S3 server: (key, bytes), by key,
/// but the sink's claims, hidden (`_…`) as readers following Hive's
/// convention hide them.
pub fn s3_files(prefix: &str) -> Vec<(String, Vec<u8>)> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let store = store();
        let mut pending = vec![Key::parse(prefix).unwrap()];
        let mut files = Vec::new();
        while let Some(dir) = pending.pop() {
            let listing = store.list_with_delimiter(Some(&dir)).await.unwrap();
            pending.extend(listing.common_prefixes);
            for object in listing.objects.into_iter().filter(|o| !o.location.filename().unwrap_or("_").starts_with('_'))
            {
                let bytes = store.get(&object.location).await.unwrap().bytes().await.unwrap();
                files.push((object.location.to_string(), bytes.to_vec()));
            }
        }
        files.sort();
        files
    })
}

/// Every file under `root` on local disk, except the sink's staging folder
/// and its claims.
pub fn local_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with(['.', '_']) {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                let name = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                files.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

pub fn parquet_batches(bytes: &[u8]) -> Vec<RecordBatch> {
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(bytes)).unwrap().build().unwrap();
    reader.map(Result::unwrap).collect()
}

/// The event positions a file holds, in file order, whatever its format.
pub fn positions(name: &str, bytes: &[u8]) -> Vec<String> {
    if name.ends_with(".parquet") {
        return parquet_batches(bytes)
            .iter()
            .flat_map(|b| {
                let column = b.column_by_name("sluice_position").unwrap().as_string::<i32>().clone();
                (0..column.len()).map(move |i| column.value(i).to_string()).collect::<Vec<_>>()
            })
            .collect();
    }
    let mut text = String::new();
    if name.ends_with(".gz") {
        flate2::read::GzDecoder::new(bytes).read_to_string(&mut text).unwrap();
    } else {
        text = String::from_utf8(bytes.to_vec()).unwrap();
    }
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["position"].as_str().unwrap().to_string())
        .collect()
}

/// Checks the files of one sink: every expected position exactly once
/// across all files, each file in order, and its name's range matching
/// what it holds. Returns the file count.
pub fn assert_exactly_once(files: &[(String, Vec<u8>)], sink: &str, expected: &[String]) -> usize {
    let ours: Vec<&(String, Vec<u8>)> = files.iter().filter(|(name, _)| name.contains(&format!("_{sink}."))).collect();
    let mut all: Vec<String> = Vec::new();
    for (name, bytes) in &ours {
        let held = positions(name, bytes);
        assert!(!held.is_empty(), "{name} is empty");
        let parsed: Vec<sluice_core::Position> = held.iter().map(|p| p.parse().unwrap()).collect();
        assert!(parsed.windows(2).all(|w| w[0] < w[1]), "{name} is out of order");
        let file = name.rsplit('/').next().unwrap();
        let (first, rest) = file.split_once('_').unwrap();
        let last = rest.split_once('_').unwrap().0;
        assert_eq!(
            (first, last),
            (parsed[0].sort_key().as_str(), parsed[parsed.len() - 1].sort_key().as_str()),
            "{name}"
        );
        all.extend(held);
    }
    let mut counts = std::collections::BTreeMap::new();
    for position in &all {
        *counts.entry(position.as_str()).or_insert(0) += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "sink {sink}: events in more than one file: {twice:?}");
    let wanted: std::collections::BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    let held: std::collections::BTreeSet<&str> = counts.keys().copied().collect();
    let missing: Vec<_> = wanted.difference(&held).take(5).collect();
    assert!(
        missing.is_empty(),
        "sink {sink}: {} events missing, e.g. {missing:?}",
        wanted.len() - held.len().min(wanted.len())
    );
    assert_eq!(held, wanted, "sink {sink} holds events nobody produced");
    ours.len()
}
