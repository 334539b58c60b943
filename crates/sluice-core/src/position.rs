//! Typed, totally ordered positions in a source's log.
//!
//! A position names one event: the place of its transaction in the log plus the
//! event's sequence number inside that transaction. Positions of one source are
//! compared with `Ord`; the canonical text form (`Display` / `FromStr`) is what
//! the checkpoint store and the sinks persist, so it must round-trip exactly.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PostgreSQL log sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
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

/// Where an event sits in its source's log.
///
/// Variants are ordered by kind first; comparing positions of two different
/// kinds only happens when a source was swapped under the same id, and the
/// order is then arbitrary but still total.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Position {
    /// The synthetic generator: transaction number (from 1) and event index.
    Generator { tx: u64, seq: u32 },
    /// PostgreSQL: the commit LSN of the transaction and the event index in it.
    Postgres { commit_lsn: Lsn, seq: u32 },
}

impl Position {
    /// The event's index within its transaction.
    pub fn seq(&self) -> u32 {
        match self {
            Position::Generator { seq, .. } | Position::Postgres { seq, .. } => *seq,
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Generator { tx, seq } => write!(f, "gen:{tx}:{seq}"),
            Position::Postgres { commit_lsn, seq } => write!(f, "pg:{commit_lsn}:{seq}"),
        }
    }
}

impl FromStr for Position {
    type Err = PositionParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
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

#[cfg(test)]
mod tests {
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
        for position in [
            generator(0, 0),
            generator(u64::MAX, u32::MAX),
            Position::Postgres { commit_lsn: Lsn(0x16_B374_D848), seq: 3 },
        ] {
            let text = position.to_string();
            assert_eq!(text.parse::<Position>().unwrap(), position, "{text}");
        }
        assert_eq!(Position::Postgres { commit_lsn: Lsn(0x16_B374_D848), seq: 3 }.to_string(), "pg:16/B374D848:3");
    }

    #[test]
    fn garbage_is_rejected_not_panicked_on() {
        for text in
            ["", "gen", "gen:1", "gen:x:1", "gen:1:2:3", "pg:zz:1", "pg:1/2:-1", "kafka:1:1", "gen:1:99999999999"]
        {
            assert!(text.parse::<Position>().is_err(), "{text}");
        }
    }
}
