use std::sync::Arc;
use std::time::Instant;
use sluice_core::*;
use sluice_transform::*;

fn main() {
    let yaml = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    let configs: Vec<TransformConfig> = serde_yaml::from_str(&yaml).unwrap();
    let t = Transforms::build(&configs).unwrap();
    let columns: Arc<[Arc<str>]> = ["id", "customer", "amount", "status", "created_at"].map(Arc::from).to_vec().into();
    let schema = Arc::new(TableSchema {
        columns: ["id", "customer", "amount", "status", "created_at"].iter().map(|n| ColumnSchema { name: Arc::from(*n), type_name: "text".into(), ty: ColumnType::Text { length: None }, nullable: true, default: None }).collect(),
        primary_key: vec![0],
    });
    let n = 200_000;
    let mut best = f64::MAX;
    for _ in 0..7 {
    let mut events: Vec<Event> = (0..n).map(|i: i64| {
        let row = Row { columns: columns.clone(), values: vec![Value::Int(i), Value::Text(format!("customer-{}", i % 1000)), Value::Decimal(format!("{}.{:02}", i % 1000, i % 100)), Value::Text(if i % 10 == 3 { "cancelled".into() } else { "paid".into() }), Value::TimestampTz("2026-12-04T03:00:00.123456Z".into())] };
        Event {
            op: Op::Insert, source_id: "s".into(), database: "d".into(), table: "public.orders".into(),
            key: Some(Row { columns: vec![Arc::from("id")].into(), values: vec![Value::Int(i)] }),
            before: None, after: Some(row), schema_version: 1,
            position: Position::Postgres { commit_lsn: Lsn(0x100), seq: i as u32 }, tx_id: "7".into(), tx_end: true,
            commit_time_us: 1, schema: Some(schema.clone()), origin: Origin::None, route: None, shape: Default::default(),
        }
    }).collect();
    let start = Instant::now();
    let v = t.apply_all(&mut events);
    let secs = start.elapsed().as_secs_f64();
    best = best.min(secs);
    assert!(v.len() == n as usize);
    }
    println!("{:.0} ns/event (best of 7)", best * 1e9 / n as f64);
}
