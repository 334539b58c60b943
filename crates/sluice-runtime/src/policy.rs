//! The commit policy frontier, a pure function.
//!
//! The frontier is the highest position every sink the policy requires
//! holds durably. No stored checkpoint may pass it: a sink's new checkpoint
//! is the lower of its own durable watermark and the frontier.

use sluice_config::PolicyMode;
use sluice_core::Position;

/// One sink as the policy sees it.
#[derive(Debug, Clone)]
pub struct SinkState<'a> {
    pub required: bool,
    pub durable: Option<&'a Position>,
}

/// The frontier under `mode`, or `None` when the policy is not met yet.
pub fn frontier(mode: PolicyMode, quorum: Option<usize>, sinks: &[SinkState<'_>]) -> Option<Position> {
    let lowest_of_required = || -> Option<Option<&Position>> {
        let mut lowest: Option<&Position> = None;
        for sink in sinks.iter().filter(|s| s.required) {
            let durable = sink.durable?;
            lowest = Some(lowest.map_or(durable, |l| l.min(durable)));
        }
        Some(lowest)
    };
    match mode {
        PolicyMode::Required => lowest_of_required()?.cloned(),
        PolicyMode::All => {
            let mut lowest: Option<&Position> = None;
            for sink in sinks {
                let durable = sink.durable?;
                lowest = Some(lowest.map_or(durable, |l| l.min(durable)));
            }
            lowest.cloned()
        }
        PolicyMode::Quorum => {
            let n = quorum.unwrap_or(sinks.len()).max(1);
            let mut held: Vec<&Position> = sinks.iter().filter_map(|s| s.durable).collect();
            if held.len() < n {
                return None;
            }
            held.sort_unstable_by(|a, b| b.cmp(a));
            let nth_highest = held[n - 1];
            match lowest_of_required()? {
                Some(required) => Some(required.min(nth_highest).clone()),
                None => Some(nth_highest.clone()),
            }
        }
    }
}

/// A sink's proposed checkpoint: its durable watermark, capped by the
/// frontier. `None` when either is unknown.
pub fn proposal(durable: Option<&Position>, frontier: Option<&Position>) -> Option<Position> {
    Some(durable?.min(frontier?).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tx: u64) -> Position {
        Position::Generator { tx, seq: 0 }
    }

    fn sinks<'a>(states: &'a [(bool, Option<Position>)]) -> Vec<SinkState<'a>> {
        states.iter().map(|(required, durable)| SinkState { required: *required, durable: durable.as_ref() }).collect()
    }

    #[test]
    fn required_mode_waits_for_the_slowest_required_sink_only() {
        let states = [(true, Some(at(5))), (true, Some(at(3))), (false, Some(at(1)))];
        assert_eq!(frontier(PolicyMode::Required, None, &sinks(&states)), Some(at(3)));
        let states = [(true, Some(at(5))), (true, None), (false, Some(at(9)))];
        assert_eq!(frontier(PolicyMode::Required, None, &sinks(&states)), None);
    }

    #[test]
    fn all_mode_waits_for_every_sink() {
        let states = [(true, Some(at(5))), (false, Some(at(2)))];
        assert_eq!(frontier(PolicyMode::All, None, &sinks(&states)), Some(at(2)));
        let states = [(true, Some(at(5))), (false, None)];
        assert_eq!(frontier(PolicyMode::All, None, &sinks(&states)), None);
    }

    #[test]
    fn quorum_takes_the_nth_highest_but_never_passes_a_required_sink() {
        let states = [(false, Some(at(9))), (false, Some(at(7))), (false, Some(at(2)))];
        assert_eq!(frontier(PolicyMode::Quorum, Some(2), &sinks(&states)), Some(at(7)));
        let states = [(false, Some(at(9))), (false, Some(at(7))), (true, Some(at(4)))];
        assert_eq!(frontier(PolicyMode::Quorum, Some(2), &sinks(&states)), Some(at(4)));
        let states = [(false, Some(at(9))), (false, None), (false, None)];
        assert_eq!(frontier(PolicyMode::Quorum, Some(2), &sinks(&states)), None);
        let states = [(false, Some(at(9))), (false, Some(at(8))), (true, None)];
        assert_eq!(frontier(PolicyMode::Quorum, Some(2), &sinks(&states)), None);
    }

    #[test]
    fn a_proposal_is_capped_by_the_frontier() {
        assert_eq!(proposal(Some(&at(9)), Some(&at(4))), Some(at(4)));
        assert_eq!(proposal(Some(&at(2)), Some(&at(4))), Some(at(2)));
        assert_eq!(proposal(None, Some(&at(4))), None);
        assert_eq!(proposal(Some(&at(2)), None), None);
    }
}
