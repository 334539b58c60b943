use super::*;

fn generator(tx: u64, seq: u32) -> Position {
    Position::Generator { tx, seq }
}

#[test]
fn transaction_orders_before_sequence() {
    assert!(generator(1, 9) < generator(2, 0));
    assert!(generator(2, 0) < generator(2, 1));
    let low = Position::Postgres { commit_lsn: Lsn(0x1_0000_0000), seq: 5 };
    let high = Position::Postgres { commit_lsn: Lsn(0x1_0000_0001), seq: 0 };
    assert!(low < high);
}

#[test]
fn text_form_round_trips() {
    for position in
        [generator(0, 0), generator(u64::MAX, u32::MAX), Position::Postgres { commit_lsn: Lsn(0x16_B374_D848), seq: 3 }]
    {
        let text = position.to_string();
        assert_eq!(text.parse::<Position>().unwrap(), position, "{text}");
    }
    assert_eq!(Position::Postgres { commit_lsn: Lsn(0x16_B374_D848), seq: 3 }.to_string(), "pg:16/B374D848:3");
    for lsn in [0, 1, 0xF, 0x10, 0xFFFF_FFFF, 0x1_0000_0000, u64::MAX, 0xABC_0000_0DEF] {
        assert_eq!(Lsn(lsn).to_string(), format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF));
    }
    assert_eq!(Position::Generator { tx: 12, seq: 0 }.to_string(), "gen:12:0");
}

fn binlog(file: &str, offset: u64, seq: u32, gtid: Option<&str>) -> Position {
    Position::Mysql(BinlogPos { file: file.into(), offset, seq, gtid_before: gtid.map(Arc::from) })
}

#[test]
fn binlog_positions_order_by_file_number_then_offset() {
    assert!(binlog("bin.999999", 9000, 0, None) < binlog("bin.1000000", 4, 0, None));
    assert!(binlog("bin.000002", 100, 5, None) < binlog("bin.000002", 200, 0, None));
    assert!(binlog("bin.000002", 100, 5, None) < binlog("bin.000002", 100, 6, None));
    assert_eq!(binlog("bin.000002", 100, 5, Some("0-1-7")), binlog("bin.000002", 100, 5, None));
    for position in [binlog("mariadb-bin.000003", 1234, 2, Some("0-4242-17,1-9-3")), binlog("b.000001", 4, 0, None)] {
        assert_eq!(position.to_string().parse::<Position>().unwrap().to_string(), position.to_string());
    }
    let mysql = binlog("binlog.000001", 4, 0, Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"));
    let Position::Mysql(parsed) = mysql.to_string().parse::<Position>().unwrap() else { panic!() };
    assert_eq!(parsed.gtid_before.as_deref(), Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"));
    for bad in ["my:", "my::4:0", "my:f:x:0", "my:f:4", "my:f:4:-1"] {
        assert!(bad.parse::<Position>().is_err(), "{bad}");
    }
}

/// Object names carry sort keys, so their text outlives any build.
#[test]
fn sort_keys_keep_their_text() {
    let snapshot = SnapshotPos { table: "t".into(), key: Arc::from(&[1u8, 0xAB][..]), stream_from: "0/10".into() };
    let later = Position::Later { generation: 2, inner: Box::new(generator(3, 4)) };
    for (position, key) in [
        (generator(7, 1), "g000000000000000000070000000001"),
        (Position::Postgres { commit_lsn: Lsn(0x1AB), seq: 2 }, "p00000000000001AB0000000002"),
        (
            binlog("bin.000009", 500, 1, None),
            concat!("m", "00000000000000000009", "00000000000000000500", "0000000001"),
        ),
        (Position::Snapshot(snapshot), "a74.01ab"),
        (later, "z0000000002g000000000000000000030000000004"),
    ] {
        assert_eq!(position.sort_key(), key);
        let mut appended = String::from("x");
        position.write_sort_key(&mut appended);
        assert_eq!(appended, format!("x{key}"));
    }
}

#[test]
fn sort_keys_order_like_positions() {
    let positions = [
        generator(1, 9),
        generator(2, 0),
        generator(10, 0),
        Position::Postgres { commit_lsn: Lsn(0xFF), seq: 3 },
        Position::Postgres { commit_lsn: Lsn(0x100), seq: 0 },
        binlog("bin.000009", 500, 1, None),
        binlog("bin.000010", 4, 0, None),
    ];
    for pair in positions.windows(2) {
        if std::mem::discriminant(&pair[0]) == std::mem::discriminant(&pair[1]) {
            assert!(pair[0] < pair[1] && pair[0].sort_key() < pair[1].sort_key(), "{} {}", pair[0], pair[1]);
        }
    }
}

#[test]
fn a_snapshot_orders_before_the_stream_and_round_trips() {
    use crate::snapshot::{KeyPart, encode_key};
    let snapshot = Position::Snapshot(SnapshotPos {
        table: "public.orders".into(),
        key: encode_key(&[KeyPart::Int(i64::MAX)]).into(),
        stream_from: "0/16B3748".into(),
    });
    assert!(snapshot < Position::Postgres { commit_lsn: Lsn(0), seq: 0 });
    assert!(snapshot < binlog("bin.000001", 4, 0, None));
    assert_eq!(snapshot.to_string().parse::<Position>().unwrap(), snapshot);
    assert!(snapshot.to_string().starts_with("snap:7075626c69632e6f7264657273:ff"), "{snapshot}");
    assert!("snap:7:00:x".parse::<Position>().is_err());
    // A key longer than the buffer the text is written through.
    let long: Vec<u8> = (0..=200u8).collect();
    let snapshot =
        Position::Snapshot(SnapshotPos { table: "t".into(), key: long.clone().into(), stream_from: "0/1".into() });
    let text: String = long.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(snapshot.to_string(), format!("snap:74:{text}:0/1"));
    assert_eq!(snapshot.to_string().parse::<Position>().unwrap(), snapshot);
}

#[test]
fn a_later_generation_orders_after_every_position_of_an_earlier_one() {
    // After RESET MASTER the log starts over at file 1: a sink that
    // holds file 5 of the old log must not hide the new file 1.
    let old = binlog("mariadb-bin.000005", 900, 3, None);
    let new = binlog("mariadb-bin.000001", 4, 0, None).in_generation(1);
    assert!(old < new && old.sort_key() < new.sort_key());
    let newer = binlog("mariadb-bin.000001", 4, 0, None).in_generation(2);
    assert!(new < newer && new.sort_key() < newer.sort_key());
    let snapshot = Position::Snapshot(SnapshotPos {
        table: "t".into(),
        key: vec![0].into(),
        stream_from: "my:mariadb-bin.000001:4:0".into(),
    });
    let pg = Position::Postgres { commit_lsn: Lsn(u64::MAX), seq: u32::MAX };
    assert!(pg < snapshot.clone().in_generation(1), "a new generation's snapshot follows the old stream");
    // Within a generation, the log's own order.
    let later = binlog("mariadb-bin.000001", 4, 1, None).in_generation(1);
    assert!(new < later && new.sort_key() < later.sort_key());
    assert_eq!(later.seq(), 1);
    assert_eq!(new.with_seq(1), later);
}

#[test]
fn generation_zero_is_the_plain_position_and_later_ones_round_trip() {
    let plain = binlog("mariadb-bin.000001", 4, 0, Some("0-1-5"));
    assert_eq!(plain.clone().in_generation(0).to_string(), plain.to_string());
    let later = plain.clone().in_generation(3);
    assert_eq!(later.to_string(), "e3/my:mariadb-bin.000001:4:0:0-1-5");
    assert_eq!(later.generation(), 3);
    assert_eq!(later.base(), &plain);
    assert_eq!(later.clone().in_generation(4).generation(), 4, "moved, not nested");
    assert_eq!(later.clone().in_generation(0), plain);
    for position in [later, Position::Postgres { commit_lsn: Lsn(0x16_B374_D848), seq: 3 }.in_generation(1)] {
        let text = position.to_string();
        assert_eq!(text.parse::<Position>().unwrap(), position, "{text}");
    }
    for bad in ["e", "e1", "e0/gen:1:0", "ex/gen:1:0", "e1/", "e1/e2/gen:1:0", "e99999999999/gen:1:0"] {
        assert!(bad.parse::<Position>().is_err(), "{bad}");
    }
}

#[test]
fn garbage_is_rejected_not_panicked_on() {
    for text in ["", "gen", "gen:1", "gen:x:1", "gen:1:2:3", "pg:zz:1", "pg:1/2:-1", "kafka:1:1", "gen:1:99999999999"] {
        assert!(text.parse::<Position>().is_err(), "{text}");
    }
}
