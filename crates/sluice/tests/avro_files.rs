//! Avro object container files from the s3 sink (here on local disk, the
//! same commit path as a bucket), read by fastavro with nothing but the
//! files: the type zoo in every codec compared with the rows PostgreSQL
//! holds, and a DDL that begins a file with the table's new schema.

mod common;

use std::path::Path;
use std::time::Duration;

use common::avro::{ZOO, ZOO_WORKLOAD, avro_files, database_rows, pg_config, zoo_after};
use common::pg::{drop_slots, fresh_database, sql, stop, wait_for_slot};
use common::*;
use serde_json::{Value, json};

/// Every record of the files under `folder`, with the file it is in.
fn records(folder: &Path) -> Vec<(String, Value)> {
    avro_files(folder)
        .into_iter()
        .flat_map(|file| {
            let name = file["file"].as_str().unwrap().to_string();
            file["records"].as_array().unwrap().iter().map(|r| (name.clone(), r.clone())).collect::<Vec<_>>()
        })
        .collect()
}

fn wait_for_records(folder: &Path, count: usize) -> Vec<(String, Value)> {
    let mut found = Vec::new();
    wait_until(Duration::from_secs(60), &format!("{count} records in {}", folder.display()), || {
        found = records(folder);
        found.len() >= count
    });
    found
}

#[test]
fn fastavro_reads_the_type_zoo_from_avro_files_in_every_codec_as_postgres_holds_it() {
    let db = "avro_files_zoo";
    fresh_database(db);
    sql(db, ZOO);
    let dir = tempfile::tempdir().unwrap();
    let codecs = [("none", "null"), ("deflate", "deflate"), ("snappy", "snappy"), ("zstd", "zstandard")];
    let sinks: String = codecs
        .iter()
        .map(|(compression, _)| {
            format!(
                "      - type: s3\n        config: {{ id: {compression}, local: {compression}, format: avro, compression: {compression}, max_file_age_secs: 1 }}\n"
            )
        })
        .collect();
    let config = write_config(dir.path(), &pg_config(db, &sinks));
    let child = spawn(&["run", "-c", config.to_str().unwrap()], dir.path());
    wait_for_slot(db);
    for statement in ZOO_WORKLOAD {
        sql(db, statement);
    }
    for (compression, codec) in codecs {
        // 3 inserts, an update and a delete; files have no tombstones.
        let folder = dir.path().join(compression);
        let found = wait_for_records(&folder, 5);
        assert_eq!(found.len(), 5, "{compression}: {found:?}");
        let table = zoo_after(found.iter().map(|(_, value)| value));
        assert_eq!(table, database_rows(db), "the rows fastavro read from the {compression} files");
        let ops: Vec<&str> = found.iter().map(|(_, v)| v["op"].as_str().unwrap()).collect();
        assert_eq!(ops, ["c", "c", "c", "u", "d"], "{compression}");
        for file in avro_files(&folder) {
            assert_eq!(file["codec"], codec, "{compression}");
            let schema = &file["schema"];
            // fastavro gives the full name.
            assert_eq!(schema["name"], format!("{db}.public.zoo.Envelope"), "{schema}");
            let row = &schema["fields"][0]["type"][1];
            let amount = row["fields"].as_array().unwrap().iter().find(|f| f["name"] == "amount").unwrap();
            let decimal = &amount["type"][1];
            assert_eq!((decimal["logicalType"].as_str(), decimal["precision"].as_u64()), (Some("decimal"), Some(12)));
            assert_eq!(decimal["scale"], 2);
        }
    }
    stop(child, dir.path());
    drop_slots(db);
}

/// The row columns of a file's schema.
fn columns(schema: &Value) -> Vec<String> {
    // `before` defines the row record; `after` names it.
    let row = schema["fields"][0]["type"][1]["fields"].as_array().unwrap();
    row.iter().map(|f| f["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_ddl_begins_a_file_with_the_new_schema_and_a_kill_9_writes_nothing_twice() {
    let db = "avro_files_ddl";
    fresh_database(db);
    sql(db, "CREATE TABLE t (id int PRIMARY KEY, a text)");
    let dir = tempfile::tempdir().unwrap();
    let sink = "      - type: s3\n        config: { id: lake, local: lake, format: { file: avro, topic_prefix: shop }, max_file_age_secs: 1 }\n";
    let config = write_config(dir.path(), &pg_config(db, sink));
    let config = config.to_str().unwrap();
    let mut child = spawn(&["run", "-c", config], dir.path());
    wait_for_slot(db);
    sql(db, "INSERT INTO t VALUES (1, 'x'), (2, 'y')");
    sql(db, "ALTER TABLE t ADD COLUMN c text");
    sql(db, "INSERT INTO t VALUES (3, 'z', 'new')");
    sql(db, "UPDATE t SET c = 'set' WHERE id = 1");
    let lake = dir.path().join("lake");
    wait_for_records(&lake, 4);
    child.kill9();
    let child = spawn(&["run", "-c", config], dir.path());
    sql(db, "INSERT INTO t VALUES (4, 'w', 'after')");
    let found = wait_for_records(&lake, 5);

    let seen: Vec<(String, Value)> =
        found.iter().map(|(_, v)| (v["op"].as_str().unwrap().to_string(), v["after"]["id"].clone())).collect();
    let expected: Vec<(String, Value)> =
        [("c", 1), ("c", 2), ("c", 3), ("u", 1), ("c", 4)].iter().map(|(op, id)| (op.to_string(), json!(id))).collect();
    assert_eq!(seen, expected, "each event once, in commit order");
    let files = avro_files(&lake);
    let file_of = |id: i64| found.iter().find(|(_, v)| v["after"]["id"] == id).unwrap().0.clone();
    let schema_of = |name: &str| files.iter().find(|f| f["file"] == name).unwrap()["schema"].clone();
    assert_eq!(columns(&schema_of(&file_of(2))), ["id", "a"], "before the DDL");
    assert_ne!(file_of(2), file_of(3), "the DDL begins a new file");
    assert_eq!(columns(&schema_of(&file_of(3))), ["id", "a", "c"], "after the DDL");
    assert_eq!(found.iter().find(|(_, v)| v["op"] == "u").unwrap().1["after"]["c"], "set");
    assert_eq!(schema_of(&file_of(2))["name"], "shop.public.t.Envelope");
    stop(child, dir.path());
    drop_slots(db);
}
