//! Positions of rows read by a snapshot.
//!
//! A snapshot reads each table in primary-key order, so a row's place is
//! its table and its key. The key is encoded so that comparing the bytes
//! compares the keys (integers big-endian with the sign bit flipped, text
//! and bytes with 0x00 escaped and a 0x00 0x01 terminator), and a crashed
//! snapshot resumes right after the last key every sink holds. Snapshot
//! positions order before every log position of the same source: the
//! stream that follows a snapshot starts where the snapshot was taken.

pub mod incremental;
mod pieces;
pub mod progress;
mod run;

pub use crate::position::{SnapshotPos, hex, unhex};

pub use pieces::{PIECE_EVENTS, Pieces};
pub use run::{Chunk, ChunkSender, LogGuard, ResumeKey, Run, SnapshotTable, TableReader};

/// One column value of a key, as the encoding sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    Int(i64),
    /// Text compared byte by byte (PostgreSQL's `C` collation).
    Text(String),
    Bytes(Vec<u8>),
}

/// The kind of each key column, to decode an encoded key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Int,
    Text,
    Bytes,
}

/// Encodes key parts so that byte order is key order.
pub fn encode_key(parts: &[KeyPart]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key_into(parts, &mut out);
    out
}

/// [`encode_key`] appended to `out`, so a reader can reuse one buffer for
/// every row's key.
pub fn encode_key_into(parts: &[KeyPart], out: &mut Vec<u8>) {
    for part in parts {
        match part {
            KeyPart::Int(v) => push_key_int(out, *v),
            KeyPart::Text(text) => push_key_bytes(out, text.as_bytes()),
            KeyPart::Bytes(bytes) => push_key_bytes(out, bytes),
        }
    }
}

/// One [`KeyPart::Int`] of an encoded key, appended to `out`.
pub fn push_key_int(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&((value as u64) ^ (1 << 63)).to_be_bytes());
}

/// One [`KeyPart::Bytes`] (or `Text`) of an encoded key, appended to `out`.
pub fn push_key_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 1]);
}

/// Decodes a key written by [`encode_key`]; `None` if it does not match `kinds`.
pub fn decode_key(mut bytes: &[u8], kinds: &[KeyKind]) -> Option<Vec<KeyPart>> {
    let mut parts = Vec::with_capacity(kinds.len());
    for kind in kinds {
        match kind {
            KeyKind::Int => {
                let (head, rest) = bytes.split_first_chunk::<8>()?;
                parts.push(KeyPart::Int((u64::from_be_bytes(*head) ^ (1 << 63)) as i64));
                bytes = rest;
            }
            KeyKind::Text | KeyKind::Bytes => {
                let mut raw = Vec::new();
                let mut i = 0;
                loop {
                    match (bytes.get(i)?, bytes.get(i + 1)) {
                        (0, Some(0xFF)) => raw.push(0),
                        (0, Some(1)) => break,
                        (0, _) => return None,
                        (b, _) => {
                            raw.push(*b);
                            i += 1;
                            continue;
                        }
                    }
                    i += 2;
                }
                bytes = &bytes[i + 2..];
                parts.push(match kind {
                    KeyKind::Text => KeyPart::Text(String::from_utf8(raw).ok()?),
                    _ => KeyPart::Bytes(raw),
                });
            }
        }
    }
    bytes.is_empty().then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: &[KeyPart]) -> Vec<u8> {
        encode_key(parts)
    }

    #[test]
    fn integer_keys_order_numerically_with_negatives_first() {
        let values = [i64::MIN, -1_000_000, -1, 0, 1, 255, 256, 1 << 40, i64::MAX];
        for pair in values.windows(2) {
            assert!(key(&[KeyPart::Int(pair[0])]) < key(&[KeyPart::Int(pair[1])]), "{pair:?}");
        }
    }

    #[test]
    fn text_keys_order_bytewise_and_a_prefix_comes_first() {
        let values = ["", "\0", "\0\0", "\0a", "a", "a\0", "ab", "b", "é"];
        for pair in values.windows(2) {
            let (a, b) = (KeyPart::Text(pair[0].into()), KeyPart::Text(pair[1].into()));
            assert!(key(std::slice::from_ref(&a)) < key(std::slice::from_ref(&b)), "{pair:?}");
            // The first column decides before the second is looked at.
            assert!(key(&[a, KeyPart::Int(i64::MAX)]) < key(&[b, KeyPart::Int(i64::MIN)]), "{pair:?}");
        }
    }

    #[test]
    fn keys_decode_to_what_was_encoded() {
        let parts = vec![KeyPart::Text("a\0b".into()), KeyPart::Int(-7), KeyPart::Bytes(vec![0, 1, 0xFF, 0])];
        let kinds = [KeyKind::Text, KeyKind::Int, KeyKind::Bytes];
        assert_eq!(decode_key(&encode_key(&parts), &kinds), Some(parts.clone()));
        // Wrong kinds or trailing bytes are refused, not misread.
        assert_eq!(decode_key(&encode_key(&parts), &kinds[..2]), None);
        assert_eq!(decode_key(&encode_key(&parts[1..]), &kinds), None);
        assert_eq!(decode_key(&[0, 7], &[KeyKind::Text]), None);
    }

    #[test]
    fn text_form_round_trips_and_sort_keys_order_like_positions() {
        let at = |table: &str, id: i64| SnapshotPos {
            table: table.into(),
            key: encode_key(&[KeyPart::Int(id)]).into(),
            stream_from: "0/16B3748:0".into(),
        };
        let positions = [at("public.a", -5), at("public.a", 3), at("public.ab", -9), at("public.b", 0)];
        for pair in positions.windows(2) {
            assert!(pair[0] < pair[1] && pair[0].sort_key() < pair[1].sort_key(), "{} {}", pair[0], pair[1]);
        }
        for position in positions {
            let parsed = SnapshotPos::parse(&position.to_string()).unwrap();
            assert_eq!(parsed, position);
            assert_eq!(parsed.stream_from, position.stream_from);
        }
        for bad in ["", "zz:00:x", "61:0:x", "61:00"] {
            assert!(SnapshotPos::parse(bad).is_none(), "{bad}");
        }
    }
}
