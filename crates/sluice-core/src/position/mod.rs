//! Typed, totally ordered positions in a source's log.
//!
//! A position names one event: the place of its transaction in the log plus the
//! event's sequence number inside that transaction. Positions of one source are
//! compared with `Ord`; the canonical text form (`Display` / `FromStr`) is what
//! the checkpoint store and the sinks persist, so it must round-trip exactly.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::StackText;

/// A PostgreSQL log sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// `X/Y` in upper-case hex, written by hand into `text`: every
    /// PostgreSQL event's position and id print it.
    fn digits<'a>(&self, text: &'a mut [u8; 17]) -> &'a [u8] {
        let mut at = text.len();
        for (half, slash) in [(self.0 & 0xFFFF_FFFF, false), (self.0 >> 32, true)] {
            if slash {
                at -= 1;
                text[at] = b'/';
            }
            let mut rest = half;
            loop {
                at -= 1;
                text[at] = b"0123456789ABCDEF"[(rest & 0xF) as usize];
                rest >>= 4;
                if rest == 0 {
                    break;
                }
            }
        }
        &text[at..]
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(std::str::from_utf8(self.digits(&mut [0; 17])).map_err(|_| fmt::Error)?)
    }
}

impl FromStr for Lsn {
    type Err = PositionParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (hi, lo) =
            s.split_once('/').ok_or_else(|| PositionParseError::new(s, "an LSN is written as HI/LO in hex"))?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| PositionParseError::new(s, "LSN high half is not hex"))?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| PositionParseError::new(s, "LSN low half is not hex"))?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

/// A MySQL / MariaDB binlog position: the file, the offset where the
/// event's transaction starts, and the row's index in the transaction.
///
/// Ordered by the file's numeric suffix (so `bin.1000000` follows
/// `bin.999999`, which text order gets wrong), then offset, then index.
/// `gtid_before` is the server's GTID state just before the transaction
/// (MariaDB `domain-server-seq` list), used to resume by GTID; it does not
/// take part in ordering or equality.
#[derive(Debug, Clone)]
pub struct BinlogPos {
    pub file: Arc<str>,
    pub offset: u64,
    pub seq: u32,
    pub gtid_before: Option<Arc<str>>,
}

impl BinlogPos {
    /// The numeric suffix of the file name (`mariadb-bin.000042` → 42).
    pub fn file_index(&self) -> u64 {
        binlog_file_index(&self.file)
    }
}

/// The numeric suffix of a binlog file name, 0 when there is none.
pub fn binlog_file_index(file: &str) -> u64 {
    file.rsplit('.').next().and_then(|s| s.parse().ok()).unwrap_or(0)
}

impl PartialEq for BinlogPos {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for BinlogPos {}

impl std::hash::Hash for BinlogPos {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.file.hash(state);
        self.offset.hash(state);
        self.seq.hash(state);
    }
}

impl PartialOrd for BinlogPos {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BinlogPos {
    fn cmp(&self, other: &Self) -> Ordering {
        // Nearly every comparison is within one file, where the order is
        // that of the offsets: parsing both files' indexes was most of
        // what the intake's check of every event against the last cost.
        if self.file == other.file {
            return (self.offset, self.seq).cmp(&(other.offset, other.seq));
        }
        (self.file_index(), &self.file, self.offset, self.seq).cmp(&(
            other.file_index(),
            &other.file,
            other.offset,
            other.seq,
        ))
    }
}

/// Where an event sits in its source's log.
///
/// Variants are ordered by kind first; comparing positions of two different
/// kinds only happens when a source was swapped under the same id, and the
/// order is then arbitrary but still total.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Position {
    /// A row read by a snapshot; first, so a snapshot orders before the
    /// log stream that follows it.
    Snapshot(SnapshotPos),
    /// The synthetic generator: transaction number (from 1) and event index.
    Generator { tx: u64, seq: u32 },
    /// PostgreSQL: the commit LSN of the transaction and the event index in it.
    Postgres { commit_lsn: Lsn, seq: u32 },
    /// MySQL / MariaDB binlog.
    Mysql(BinlogPos),
    /// A position of a later log generation of its source: the log was
    /// started over (`RESET MASTER`, a new server, a new replication slot)
    /// and `sluice checkpoints reset` began generation `generation` (from
    /// 1; generation 0 is the plain position). Last, so that every
    /// position of a later generation orders after every position of an
    /// earlier one, whatever the log coordinates: a sink that still holds
    /// an old generation's position never hides a newer event. Built only
    /// by [`Position::in_generation`], which never nests it.
    Later { generation: u32, inner: Box<Position> },
}

impl Position {
    /// This position, placed in log generation `generation` (0 is the
    /// source's first generation, written without a marker, so the text
    /// and event ids of positions that predate generations stay as they were).
    pub fn in_generation(self, generation: u32) -> Position {
        let base = self.into_base();
        if generation == 0 { base } else { Position::Later { generation, inner: Box::new(base) } }
    }

    /// The log generation the position belongs to.
    pub fn generation(&self) -> u32 {
        match self {
            Position::Later { generation, .. } => *generation,
            _ => 0,
        }
    }

    /// The position in its source's log, without its generation: what a
    /// source reads and resumes from.
    pub fn base(&self) -> &Position {
        match self {
            Position::Later { inner, .. } => inner,
            other => other,
        }
    }

    pub fn into_base(self) -> Position {
        match self {
            Position::Later { inner, .. } => *inner,
            other => other,
        }
    }

    /// A fixed-width text whose byte order is the position's order, for
    /// servers that can only compare strings (a Redis script, say).
    pub fn sort_key(&self) -> String {
        let mut key = String::new();
        self.write_sort_key(&mut key);
        key
    }

    /// [`Position::sort_key`] appended to `out`, for a caller that
    /// compares every event's against a key and keeps one buffer for it.
    pub fn write_sort_key(&self, out: &mut String) {
        use std::fmt::Write;
        // Writing into a String cannot fail.
        let _ = match self {
            Position::Generator { tx, seq } => write!(out, "g{tx:020}{seq:010}"),
            Position::Postgres { commit_lsn, seq } => write!(out, "p{:016X}{seq:010}", commit_lsn.0),
            Position::Mysql(pos) => write!(out, "m{:020}{:020}{:010}", pos.file_index(), pos.offset, pos.seq),
            Position::Snapshot(pos) => {
                out.push_str(&pos.sort_key());
                Ok(())
            }
            // `z` follows every other kind's first letter.
            Position::Later { generation, inner } => {
                let written = write!(out, "z{generation:010}");
                inner.write_sort_key(out);
                written
            }
        };
    }

    /// The same transaction's position at index `seq`; a snapshot
    /// position has no index and stays as it is.
    pub fn with_seq(&self, seq: u32) -> Position {
        match self {
            Position::Generator { tx, .. } => Position::Generator { tx: *tx, seq },
            Position::Postgres { commit_lsn, .. } => Position::Postgres { commit_lsn: *commit_lsn, seq },
            Position::Mysql(pos) => Position::Mysql(BinlogPos { seq, ..pos.clone() }),
            Position::Snapshot(pos) => Position::Snapshot(pos.clone()),
            Position::Later { generation, inner } => {
                Position::Later { generation: *generation, inner: Box::new(inner.with_seq(seq)) }
            }
        }
    }

    /// The event's index within its transaction.
    pub fn seq(&self) -> u32 {
        match self {
            Position::Generator { seq, .. } | Position::Postgres { seq, .. } => *seq,
            Position::Mysql(pos) => pos.seq,
            Position::Snapshot(_) => 0,
            Position::Later { inner, .. } => inner.seq(),
        }
    }
}

impl Position {
    /// The position's text, as `Display` writes it, handed to `put` in a
    /// few pieces without the formatting machinery: every event's id
    /// hashes it and every native record prints it.
    pub fn write_text(&self, put: &mut impl FnMut(&str)) {
        match self {
            Position::Generator { tx, seq } => {
                let mut text = StackText::default();
                text.push_str("gen:");
                text.push_int(*tx);
                text.push(b':');
                text.push_int(*seq);
                put(text.as_str());
            }
            Position::Postgres { commit_lsn, seq } => {
                let mut text = StackText::default();
                text.push_str("pg:");
                text.push_bytes(commit_lsn.digits(&mut [0; 17]));
                text.push(b':');
                text.push_int(*seq);
                put(text.as_str());
            }
            Position::Mysql(pos) => {
                put("my:");
                put(&pos.file);
                let mut text = StackText::default();
                text.push(b':');
                text.push_int(pos.offset);
                text.push(b':');
                text.push_int(pos.seq);
                put(text.as_str());
                if let Some(gtid) = &pos.gtid_before {
                    put(":");
                    put(gtid);
                }
            }
            Position::Snapshot(pos) => {
                Self::write_snapshot_head(&pos.table, put);
                pos.write_tail(put);
            }
            Position::Later { generation, inner } => {
                put("e");
                put(itoa::Buffer::new().format(*generation));
                put("/");
                inner.write_text(put);
            }
        }
    }

    /// The text of a snapshot row's position up to its key: the same for
    /// every row of `table`.
    pub fn write_snapshot_head(table: &str, put: &mut impl FnMut(&str)) {
        put("snap:");
        SnapshotPos::write_head(table, put);
    }
}

/// `Display` through a `write_text`: its pieces into `f`, up to the first
/// error.
fn display(f: &mut fmt::Formatter<'_>, write_text: impl FnOnce(&mut dyn FnMut(&str))) -> fmt::Result {
    let mut result = Ok(());
    write_text(&mut |piece| {
        if result.is_ok() {
            result = f.write_str(piece);
        }
    });
    result
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        display(f, |put| self.write_text(&mut |piece| put(piece)))
    }
}

impl FromStr for Position {
    type Err = PositionParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix('e') {
            let (generation, inner) =
                rest.split_once('/').ok_or_else(|| PositionParseError::new(s, "expected eGENERATION/POSITION"))?;
            let generation = generation
                .parse::<u32>()
                .ok()
                .filter(|g| *g > 0)
                .ok_or_else(|| PositionParseError::new(s, "the log generation is not a number from 1"))?;
            if inner.starts_with('e') {
                return Err(PositionParseError::new(s, "a position has one log generation"));
            }
            return Ok(inner.parse::<Position>()?.in_generation(generation));
        }
        if let Some(rest) = s.strip_prefix("my:") {
            return parse_binlog(s, rest);
        }
        if let Some(rest) = s.strip_prefix("snap:") {
            return SnapshotPos::parse(rest)
                .map(Position::Snapshot)
                .ok_or_else(|| PositionParseError::new(s, "expected snap:TABLE_HEX:KEY_HEX:STREAM_FROM"));
        }
        let mut parts = s.split(':');
        let kind = parts.next().unwrap_or_default();
        let (a, b) = match (parts.next(), parts.next(), parts.next()) {
            (Some(a), Some(b), None) => (a, b),
            _ => return Err(PositionParseError::new(s, "expected KIND:A:B")),
        };
        let seq = b.parse::<u32>().map_err(|_| PositionParseError::new(s, "sequence number is not a u32"))?;
        match kind {
            "gen" => {
                let tx = a.parse::<u64>().map_err(|_| PositionParseError::new(s, "transaction number is not a u64"))?;
                Ok(Position::Generator { tx, seq })
            }
            "pg" => Ok(Position::Postgres { commit_lsn: a.parse()?, seq }),
            _ => Err(PositionParseError::new(s, "unknown kind; expected gen or pg")),
        }
    }
}

/// Shows an optional position in logs: the position, or `start` when there
/// is none (the source's beginning).
pub fn or_start(position: Option<&Position>) -> String {
    position.map_or_else(|| "start".to_string(), Position::to_string)
}

/// `FILE:OFFSET:SEQ[:GTID]`; a GTID state may itself hold colons.
fn parse_binlog(text: &str, rest: &str) -> Result<Position, PositionParseError> {
    let mut parts = rest.splitn(4, ':');
    let (Some(file), Some(offset), Some(seq)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(PositionParseError::new(text, "expected my:FILE:OFFSET:SEQ[:GTID]"));
    };
    if file.is_empty() {
        return Err(PositionParseError::new(text, "empty binlog file name"));
    }
    let offset = offset.parse().map_err(|_| PositionParseError::new(text, "binlog offset is not a u64"))?;
    let seq = seq.parse().map_err(|_| PositionParseError::new(text, "sequence number is not a u32"))?;
    let gtid_before = parts.next().filter(|g| !g.is_empty()).map(Arc::from);
    Ok(Position::Mysql(BinlogPos { file: file.into(), offset, seq, gtid_before }))
}

impl Serialize for Position {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Position {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A stored position that could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid position {text:?}: {reason}")]
pub struct PositionParseError {
    pub text: String,
    pub reason: &'static str,
}

impl PositionParseError {
    fn new(text: &str, reason: &'static str) -> Self {
        Self { text: text.chars().take(200).collect(), reason }
    }
}

/// Where a snapshot row sits: its table and encoded key. `stream_from`
/// is where the log stream that follows the snapshot starts, in the
/// source's own terms; it takes no part in ordering or equality.
#[derive(Debug, Clone)]
pub struct SnapshotPos {
    pub table: Arc<str>,
    pub key: Arc<[u8]>,
    pub stream_from: Arc<str>,
}

impl PartialEq for SnapshotPos {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for SnapshotPos {}

impl std::hash::Hash for SnapshotPos {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.table.hash(state);
        self.key.hash(state);
    }
}

impl PartialOrd for SnapshotPos {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SnapshotPos {
    fn cmp(&self, other: &Self) -> Ordering {
        (&self.table, &self.key).cmp(&(&other.table, &other.key))
    }
}

impl SnapshotPos {
    /// Hex of the table then the key, with a separator below every hex
    /// digit, so text order is position order.
    pub fn sort_key(&self) -> String {
        format!("a{}.{}", hex(self.table.as_bytes()), hex(&self.key))
    }

    /// `TABLE_HEX:KEY_HEX:STREAM_FROM`; the stream position may hold colons.
    pub fn parse(rest: &str) -> Option<Self> {
        let mut parts = rest.splitn(3, ':');
        let (table, key, stream_from) = (parts.next()?, parts.next()?, parts.next()?);
        let table = String::from_utf8(unhex(table)?).ok()?;
        Some(Self { table: table.into(), key: unhex(key)?.into(), stream_from: stream_from.into() })
    }
}

impl SnapshotPos {
    /// The text `Display` writes, in pieces (see [`Position::write_text`]).
    pub fn write_text(&self, put: &mut impl FnMut(&str)) {
        Self::write_head(&self.table, put);
        self.write_tail(put);
    }

    /// The start of the text, the same for every row of `table`.
    pub fn write_head(table: &str, put: &mut impl FnMut(&str)) {
        write_hex(put, table.as_bytes());
        put(":");
    }

    /// The rest of the text, after [`SnapshotPos::write_head`].
    pub fn write_tail(&self, put: &mut impl FnMut(&str)) {
        write_hex(put, &self.key);
        put(":");
        put(&self.stream_from);
    }
}

impl fmt::Display for SnapshotPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        display(f, |put| self.write_text(&mut |piece| put(piece)))
    }
}

/// [`hex`] written in pieces through a buffer on the stack: a snapshot
/// prints its position for every row (its id, its JSON), and an
/// allocation per key there was a tenth of a snapshot's time.
fn write_hex(put: &mut impl FnMut(&str), bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buffer = [0u8; 128];
    for piece in bytes.chunks(buffer.len() / 2) {
        for (pair, b) in buffer.chunks_exact_mut(2).zip(piece) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0xF)];
        }
        // Hex digits are ASCII.
        put(std::str::from_utf8(&buffer[..piece.len() * 2]).unwrap_or_default());
    }
}

/// Lower-case hex; a position is printed for every event (its id, its
/// JSON), so this runs per row of a snapshot.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    write_hex(&mut |piece| out.push_str(piece), bytes);
    out
}

/// Bytes from [`hex`]; `None` for anything else.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests;
