//! The replication stream: CopyData frames (XLogData, keepalive, standby
//! status) and the pgoutput protocol v1 messages inside XLogData.
//!
//! Every read is checked; any input gives a value or a [`Malformed`]
//! error, never a panic.

use bytes::{Buf, BufMut, Bytes, BytesMut};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed replication message: {0}")]
pub struct Malformed(pub &'static str);

/// The prefix of the heartbeat messages Sluice writes; never emitted.
pub const HEARTBEAT_PREFIX: &str = "sluice_heartbeat";
/// The prefix of the messages that ask for an incremental snapshot.
pub const SIGNAL_PREFIX: &str = "sluice_signal";
/// The prefix of the watermark messages around each chunk read.
pub const WATERMARK_PREFIX: &str = "sluice_watermark";

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// A CopyData frame from the server in replication mode.
#[derive(Debug)]
pub enum Frame {
    XLogData { wal_start: u64, wal_end: u64, data: Bytes },
    Keepalive { wal_end: u64, reply_requested: bool },
}

pub fn parse_frame(mut payload: Bytes) -> Result<Frame, Malformed> {
    match u8_(&mut payload)? {
        b'w' => {
            let wal_start = u64_(&mut payload)?;
            let wal_end = u64_(&mut payload)?;
            let _send_time = u64_(&mut payload)?;
            Ok(Frame::XLogData { wal_start, wal_end, data: payload })
        }
        b'k' => {
            let wal_end = u64_(&mut payload)?;
            let _send_time = u64_(&mut payload)?;
            Ok(Frame::Keepalive { wal_end, reply_requested: u8_(&mut payload)? == 1 })
        }
        _ => Err(Malformed("unknown replication frame")),
    }
}

/// A standby status update: everything up to `flush` may be released.
pub fn status_update(flush: u64, now_unix_us: i64, reply_requested: bool) -> BytesMut {
    let mut buf = BytesMut::with_capacity(34);
    buf.put_u8(b'r');
    buf.put_u64(flush); // written
    buf.put_u64(flush); // flushed
    buf.put_u64(flush); // applied
    buf.put_i64(now_unix_us - PG_EPOCH_OFFSET_US);
    buf.put_u8(u8::from(reply_requested));
    buf
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Begin { final_lsn: u64, commit_time_pg_us: i64, xid: u32 },
    Commit { commit_lsn: u64, end_lsn: u64 },
    Origin,
    Relation(Relation),
    Type { oid: u32 },
    Insert { relation: u32, new: Tuple },
    Update { relation: u32, old: Option<OldTuple>, new: Tuple },
    Delete { relation: u32, old: OldTuple },
    Truncate { relations: Vec<u32> },
    Message { transactional: bool, lsn: u64, prefix: String, content: Bytes },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Relation {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
    pub replica_identity: u8,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Part of the replica identity (the key).
    pub key: bool,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OldTuple {
    /// Only the replica identity columns carry values.
    Key(Tuple),
    /// The whole old row (REPLICA IDENTITY FULL).
    Full(Tuple),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tuple(pub Vec<Datum>);

#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    Null,
    /// An unchanged TOASTed value the server did not send.
    Unchanged,
    Text(Bytes),
    Binary(Bytes),
}

/// Decodes one pgoutput message.
pub fn parse_message(mut data: Bytes) -> Result<Message, Malformed> {
    let data = &mut data;
    Ok(match u8_(data)? {
        b'B' => Message::Begin { final_lsn: u64_(data)?, commit_time_pg_us: u64_(data)? as i64, xid: u32_(data)? },
        b'C' => {
            let _flags = u8_(data)?;
            Message::Commit { commit_lsn: u64_(data)?, end_lsn: u64_(data)? }
        }
        b'O' => Message::Origin,
        b'R' => {
            let oid = u32_(data)?;
            let namespace = cstr(data)?;
            let name = cstr(data)?;
            let replica_identity = u8_(data)?;
            let count = u16_(data)? as usize;
            let mut columns = Vec::with_capacity(count.min(1600));
            for _ in 0..count {
                let flags = u8_(data)?;
                columns.push(Column {
                    key: flags & 1 == 1,
                    name: cstr(data)?,
                    type_oid: u32_(data)?,
                    type_modifier: u32_(data)? as i32,
                });
            }
            Message::Relation(Relation { oid, namespace, name, replica_identity, columns })
        }
        b'Y' => Message::Type { oid: u32_(data)? },
        b'I' => {
            let relation = u32_(data)?;
            expect(data, b'N')?;
            Message::Insert { relation, new: tuple(data)? }
        }
        b'U' => {
            let relation = u32_(data)?;
            let old = match u8_(data)? {
                b'K' => Some(OldTuple::Key(tuple(data)?)),
                b'O' => Some(OldTuple::Full(tuple(data)?)),
                b'N' => None,
                _ => return Err(Malformed("update without a new tuple")),
            };
            if old.is_some() {
                expect(data, b'N')?;
            }
            Message::Update { relation, old, new: tuple(data)? }
        }
        b'D' => {
            let relation = u32_(data)?;
            let old = match u8_(data)? {
                b'K' => OldTuple::Key(tuple(data)?),
                b'O' => OldTuple::Full(tuple(data)?),
                _ => return Err(Malformed("delete without an old tuple")),
            };
            Message::Delete { relation, old }
        }
        b'T' => {
            let count = u32_(data)? as usize;
            let _options = u8_(data)?;
            if count > data.len() / 4 {
                return Err(Malformed("truncate lists more relations than it holds"));
            }
            let mut relations = Vec::with_capacity(count);
            for _ in 0..count {
                relations.push(u32_(data)?);
            }
            Message::Truncate { relations }
        }
        b'M' => {
            let transactional = u8_(data)? & 1 == 1;
            let lsn = u64_(data)?;
            let prefix = cstr(data)?;
            let len = u32_(data)? as usize;
            Message::Message { transactional, lsn, prefix, content: take(data, len)? }
        }
        _ => return Err(Malformed("unknown pgoutput message type")),
    })
}

fn tuple(data: &mut Bytes) -> Result<Tuple, Malformed> {
    let count = u16_(data)? as usize;
    let mut datums = Vec::with_capacity(count.min(1600));
    for _ in 0..count {
        datums.push(match u8_(data)? {
            b'n' => Datum::Null,
            b'u' => Datum::Unchanged,
            b't' => {
                let len = u32_(data)? as usize;
                Datum::Text(take(data, len)?)
            }
            b'b' => {
                let len = u32_(data)? as usize;
                Datum::Binary(take(data, len)?)
            }
            _ => return Err(Malformed("unknown column kind in tuple")),
        });
    }
    Ok(Tuple(datums))
}

fn expect(data: &mut Bytes, tag: u8) -> Result<(), Malformed> {
    if u8_(data)? == tag { Ok(()) } else { Err(Malformed("unexpected tuple tag")) }
}

fn u8_(data: &mut Bytes) -> Result<u8, Malformed> {
    if data.is_empty() {
        return Err(Malformed("message ends early"));
    }
    Ok(data.get_u8())
}

fn u16_(data: &mut Bytes) -> Result<u16, Malformed> {
    if data.len() < 2 {
        return Err(Malformed("message ends early"));
    }
    Ok(data.get_u16())
}

fn u32_(data: &mut Bytes) -> Result<u32, Malformed> {
    if data.len() < 4 {
        return Err(Malformed("message ends early"));
    }
    Ok(data.get_u32())
}

fn u64_(data: &mut Bytes) -> Result<u64, Malformed> {
    if data.len() < 8 {
        return Err(Malformed("message ends early"));
    }
    Ok(data.get_u64())
}

fn take(data: &mut Bytes, len: usize) -> Result<Bytes, Malformed> {
    if data.len() < len {
        return Err(Malformed("message ends early"));
    }
    Ok(data.split_to(len))
}

fn cstr(data: &mut Bytes) -> Result<String, Malformed> {
    let end = data.iter().position(|b| *b == 0).ok_or(Malformed("string without terminator"))?;
    let text = String::from_utf8_lossy(&data[..end]).into_owned();
    data.advance(end + 1);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation_bytes() -> Vec<u8> {
        let mut b = vec![b'R'];
        b.extend(16384u32.to_be_bytes());
        b.extend(b"public\0orders\0");
        b.push(b'd');
        b.extend(2u16.to_be_bytes());
        b.push(1);
        b.extend(b"id\0");
        b.extend(23u32.to_be_bytes());
        b.extend((-1i32).to_be_bytes());
        b.push(0);
        b.extend(b"note\0");
        b.extend(25u32.to_be_bytes());
        b.extend((-1i32).to_be_bytes());
        b
    }

    #[test]
    fn relation_and_update_decode() {
        let Message::Relation(relation) = parse_message(Bytes::from(relation_bytes())).unwrap() else {
            panic!("relation expected")
        };
        assert_eq!(relation.name, "orders");
        assert!(relation.columns[0].key && !relation.columns[1].key);
        let mut update = vec![b'U'];
        update.extend(16384u32.to_be_bytes());
        update.extend(b"N");
        update.extend(2u16.to_be_bytes());
        update.extend(b"t\0\0\0\x017u");
        let Message::Update { old, new, .. } = parse_message(Bytes::from(update)).unwrap() else {
            panic!("update expected")
        };
        assert!(old.is_none());
        assert_eq!(new.0, vec![Datum::Text(Bytes::from_static(b"7")), Datum::Unchanged]);
    }

    #[test]
    fn every_truncation_of_a_valid_message_is_an_error_not_a_panic() {
        let bytes = relation_bytes();
        for cut in 0..bytes.len() {
            assert!(parse_message(Bytes::copy_from_slice(&bytes[..cut])).is_err(), "cut at {cut}");
        }
        for index in 0..bytes.len() {
            let mut mutated = bytes.clone();
            mutated[index] ^= 0xA5;
            let _ = parse_message(Bytes::from(mutated));
        }
        let mut huge_truncate = vec![b'T'];
        huge_truncate.extend(u32::MAX.to_be_bytes());
        huge_truncate.push(0);
        assert!(parse_message(Bytes::from(huge_truncate)).is_err());
    }

    #[test]
    fn frames_decode() {
        let mut keepalive = vec![b'k'];
        keepalive.extend(0x1234u64.to_be_bytes());
        keepalive.extend(0u64.to_be_bytes());
        keepalive.push(1);
        assert!(matches!(
            parse_frame(Bytes::from(keepalive)).unwrap(),
            Frame::Keepalive { wal_end: 0x1234, reply_requested: true }
        ));
        assert!(parse_frame(Bytes::from_static(b"w\0\0")).is_err());
        assert_eq!(status_update(5, PG_EPOCH_OFFSET_US, false).len(), 34);
    }
}
