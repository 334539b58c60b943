//! GTIDs in both flavours.
//!
//! MariaDB: `domain-server-seq`, and a replication state that holds the
//! latest GTID of each domain (`0-1-100,1-2-7`). MySQL: `uuid:N`, and GTID
//! sets `uuid:1-5:7,uuid2:1-3` of intervals per server UUID.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid GTID {text:?}: {reason}")]
pub struct GtidError {
    pub text: String,
    pub reason: &'static str,
}

fn error(text: &str, reason: &'static str) -> GtidError {
    GtidError { text: text.chars().take(200).collect(), reason }
}

/// A MariaDB GTID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MariaGtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

impl fmt::Display for MariaGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

impl std::str::FromStr for MariaGtid {
    type Err = GtidError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.trim().split('-');
        let mut next = |what| parts.next().ok_or_else(|| error(s, what));
        let domain = next("missing domain")?.parse().map_err(|_| error(s, "domain is not a number"))?;
        let server = next("missing server id")?.parse().map_err(|_| error(s, "server id is not a number"))?;
        let seq = next("missing sequence number")?.parse().map_err(|_| error(s, "sequence is not a number"))?;
        if parts.next().is_some() {
            return Err(error(s, "more than three parts"));
        }
        Ok(MariaGtid { domain, server, seq })
    }
}

/// A MariaDB replication state: the latest GTID per domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MariaState(BTreeMap<u32, MariaGtid>);

impl MariaState {
    pub fn parse(text: &str) -> Result<Self, GtidError> {
        let mut state = MariaState::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let gtid: MariaGtid = part.parse()?;
            if state.0.insert(gtid.domain, gtid).is_some() {
                return Err(error(text, "two GTIDs for one domain"));
            }
        }
        Ok(state)
    }

    /// Records that `gtid` was applied.
    pub fn apply(&mut self, gtid: MariaGtid) {
        self.0.insert(gtid.domain, gtid);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for MariaState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, gtid) in self.0.values().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{gtid}")?;
        }
        Ok(())
    }
}

/// A MySQL GTID set: per server UUID, sorted disjoint closed intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MysqlGtidSet(BTreeMap<String, Vec<(u64, u64)>>);

impl MysqlGtidSet {
    pub fn parse(text: &str) -> Result<Self, GtidError> {
        let mut set = MysqlGtidSet::default();
        for member in text.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let mut parts = member.split(':');
            let uuid = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            if !is_uuid(&uuid) {
                return Err(error(text, "server id is not a UUID"));
            }
            let mut any = false;
            for interval in parts {
                any = true;
                let (start, end) = match interval.split_once('-') {
                    Some((a, b)) => (a, b),
                    None => (interval, interval),
                };
                let start: u64 = start.trim().parse().map_err(|_| error(text, "interval start is not a number"))?;
                let end: u64 = end.trim().parse().map_err(|_| error(text, "interval end is not a number"))?;
                if start == 0 || end < start {
                    return Err(error(text, "intervals start at 1 and do not run backward"));
                }
                set.add_interval(&uuid, start, end);
            }
            if !any {
                return Err(error(text, "a server UUID without intervals"));
            }
        }
        Ok(set)
    }

    fn add_interval(&mut self, uuid: &str, start: u64, end: u64) {
        let intervals = self.0.entry(uuid.to_string()).or_default();
        intervals.push((start, end));
        intervals.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
        for (s, e) in intervals.drain(..) {
            match merged.last_mut() {
                Some(last) if s <= last.1.saturating_add(1) => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *intervals = merged;
    }

    /// Adds one transaction, `uuid:n`.
    pub fn add(&mut self, uuid: &str, n: u64) {
        self.add_interval(&uuid.to_ascii_lowercase(), n, n);
    }

    pub fn contains(&self, uuid: &str, n: u64) -> bool {
        self.0.get(&uuid.to_ascii_lowercase()).is_some_and(|iv| iv.iter().any(|(s, e)| (*s..=*e).contains(&n)))
    }

    /// Every transaction of `self` is in `other`.
    pub fn is_subset_of(&self, other: &MysqlGtidSet) -> bool {
        self.0.iter().all(|(uuid, intervals)| {
            let theirs = other.0.get(uuid).map(Vec::as_slice).unwrap_or_default();
            intervals.iter().all(|(s, e)| theirs.iter().any(|(ts, te)| ts <= s && e <= te))
        })
    }
}

impl fmt::Display for MysqlGtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, (uuid, intervals)) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            f.write_str(uuid)?;
            for (s, e) in intervals {
                if s == e { write!(f, ":{s}")? } else { write!(f, ":{s}-{e}")? }
            }
        }
        Ok(())
    }
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11";

    #[test]
    fn mariadb_gtids_and_states() {
        let gtid: MariaGtid = "0-4242-17".parse().unwrap();
        assert_eq!(gtid, MariaGtid { domain: 0, server: 4242, seq: 17 });
        let mut state = MariaState::parse("1-9-3, 0-4242-17").unwrap();
        assert_eq!(state.to_string(), "0-4242-17,1-9-3");
        state.apply("0-4242-18".parse().unwrap());
        assert_eq!(state.to_string(), "0-4242-18,1-9-3");
        assert!(MariaState::parse("").unwrap().is_empty());
        for bad in ["0-1", "0-1-2-3", "x-1-2", "0-1-2,0-1-3", "-1-2"] {
            assert!(MariaState::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mysql_gtid_sets_parse_normalise_and_compare() {
        let set = MysqlGtidSet::parse(&format!("{A}:1-5:7:6, {}:2", B.to_uppercase())).unwrap();
        assert_eq!(set.to_string(), format!("{A}:1-7,{B}:2"));
        assert!(set.contains(A, 6) && !set.contains(A, 8) && set.contains(B, 2) && !set.contains(B, 1));
        let small = MysqlGtidSet::parse(&format!("{A}:2-3")).unwrap();
        assert!(small.is_subset_of(&set));
        assert!(!set.is_subset_of(&small));
        assert!(MysqlGtidSet::default().is_subset_of(&small));
        let mut grown = small.clone();
        grown.add(A, 4);
        grown.add(A, 1);
        assert_eq!(grown.to_string(), format!("{A}:1-4"));
        assert!(!MysqlGtidSet::parse(&format!("{B}:9")).unwrap().is_subset_of(&set));
        for bad in ["nope:1", A, &format!("{A}:0-3"), &format!("{A}:5-3"), &format!("{A}:x")] {
            assert!(MysqlGtidSet::parse(bad).is_err(), "{bad}");
        }
    }
}
