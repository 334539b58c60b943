use super::*;
use crate::position::{BinlogPos, Lsn};

use InitialSnapshot as Snap;
use LogState::{Held, Lost, Missing};
use SnapshotMode::{Always, Initial, Never, WhenNeeded};
use SourceKind::{Mysql, Postgres};

fn pg(lsn: u64) -> Position {
    Position::Postgres { commit_lsn: Lsn(lsn), seq: 0 }
}

fn my(offset: u64) -> Position {
    Position::Mysql(BinlogPos { file: "bin.000002".into(), offset, seq: 0, gtid_before: None })
}

fn row(table: &str, stream_from: &Position) -> Position {
    Position::Snapshot(SnapshotPos {
        table: table.into(),
        key: Arc::from(vec![7u8]),
        stream_from: stream_from.to_string().into(),
    })
}

/// What a case expects: the plan's fields, or the refusal's name.
#[derive(Debug, PartialEq)]
enum Want {
    Plan { snapshot: &'static str, stream_from: Option<Position>, reread: bool, recover: bool, notices: Vec<Notice> },
    Refused(&'static str),
}

fn plan(snapshot: &'static str, stream_from: Option<Position>, reread: bool, recover: bool) -> Want {
    Want::Plan { snapshot, stream_from, reread, recover, notices: Vec::new() }
}

fn noting(want: Want, notice: Notice) -> Want {
    match want {
        Want::Plan { snapshot, stream_from, reread, recover, mut notices } => {
            notices.push(notice);
            Want::Plan { snapshot, stream_from, reread, recover, notices }
        }
        refused => refused,
    }
}

fn got(input: &StartInput<'_>) -> Want {
    match plan_start(input) {
        Ok(plan) => Want::Plan {
            snapshot: match &plan.snapshot {
                Snap::None => "none",
                Snap::Fresh => "fresh",
                Snap::Resume(pos) if pos.table.is_empty() => "resume from the first row",
                Snap::Resume(_) => "resume",
            },
            stream_from: plan.stream_from,
            reread: plan.reread,
            recover: plan.recover,
            notices: plan.notices,
        },
        Err(Refusal::Foreign(_)) => Want::Refused("foreign"),
        Err(Refusal::LogLost) => Want::Refused("lost"),
        Err(Refusal::LogMissing) => Want::Refused("missing"),
    }
}

/// A case: its name, the source, the checkpoint, the highest checkpoint
/// at start, the mode, whether the process started the source before,
/// what the log holds, and what the plan must be.
type Case = (&'static str, SourceKind, Option<Position>, Option<Position>, SnapshotMode, bool, LogState, Want);

fn abandoned(table: &str) -> Notice {
    Notice::SnapshotAbandoned { table: table.into() }
}

// One row a case, so the table reads as one.
#[rustfmt::skip]
#[test]
fn every_start_up_case_plans_as_documented() {
    let (p, m) = (pg(100), my(400));
    let (p_row, m_row) = (row("public.t", &p), row("db.t", &m));
    let cases: Vec<Case> = vec![
        // A new pipeline.
        ("pg fresh start, initial", Postgres, None, None, Initial, false, Missing, plan("fresh", None, false, false)),
        ("pg fresh start, slot left over", Postgres, None, None, Initial, false, Held, plan("fresh", None, false, false)),
        ("pg fresh start, never", Postgres, None, None, Never, false, Missing, plan("none", None, false, false)),
        ("my fresh start, initial", Mysql, None, None, Initial, false, Held, plan("fresh", None, false, false)),
        ("my fresh start, never", Mysql, None, None, Never, false, Held, plan("none", None, false, false)),
        ("my fresh start, when_needed", Mysql, None, None, WhenNeeded, false, Held, plan("fresh", None, false, false)),
        // Resume from a checkpoint in the log.
        ("pg resume", Postgres, Some(p.clone()), Some(p.clone()), Initial, false, Held, plan("none", Some(p.clone()), false, false)),
        ("my resume", Mysql, Some(m.clone()), Some(m.clone()), Initial, false, Held, plan("none", Some(m.clone()), false, false)),
        ("pg resume, never", Postgres, Some(p.clone()), None, Never, false, Held, plan("none", Some(p.clone()), false, false)),
        // Resume an interrupted initial snapshot.
        ("pg snapshot resumes", Postgres, Some(p_row.clone()), Some(p_row.clone()), Initial, false, Held, plan("resume", None, false, false)),
        ("my snapshot resumes at its point", Mysql, Some(m_row.clone()), None, Initial, false, Held, plan("resume", Some(m.clone()), false, false)),
        ("pg snapshot dropped under never", Postgres, Some(p_row.clone()), None, Never, false, Held, noting(plan("none", None, false, false), abandoned("public.t"))),
        ("my snapshot dropped under never streams from its point", Mysql, Some(m_row.clone()), None, Never, false, Held, noting(plan("none", Some(m.clone()), false, false), abandoned("db.t"))),
        // A sink added to a running pipeline.
        ("pg sink joins a streaming pipeline", Postgres, None, Some(p.clone()), Initial, false, Held, noting(plan("none", None, false, false), Notice::Joined(Postgres))),
        ("my sink joins a streaming pipeline", Mysql, None, Some(m.clone()), Initial, false, Held, noting(plan("none", None, false, false), Notice::Joined(Mysql))),
        ("pg sink joins, never: no warning", Postgres, None, Some(p.clone()), Never, false, Held, plan("none", None, false, false)),
        ("pg sink joins mid-snapshot", Postgres, None, Some(p_row.clone()), Initial, false, Held, plan("resume from the first row", None, false, false)),
        ("my sink joins mid-snapshot", Mysql, None, Some(m_row.clone()), Initial, false, Held, plan("resume from the first row", Some(m.clone()), false, false)),
        // The slot is gone.
        ("pg slot missing with checkpoints", Postgres, Some(p.clone()), Some(p.clone()), Initial, false, Missing, Want::Refused("missing")),
        ("pg slot missing, only a joining sink's peers hold checkpoints", Postgres, None, Some(p.clone()), WhenNeeded, false, Missing, Want::Refused("missing")),
        ("pg slot missing, when_needed", Postgres, Some(p.clone()), Some(p.clone()), WhenNeeded, false, Missing, plan("none", Some(p.clone()), false, true)),
        ("pg slot invalidated", Postgres, Some(p.clone()), Some(p.clone()), Initial, false, Lost, Want::Refused("lost")),
        ("pg slot invalidated, no checkpoint", Postgres, None, None, Initial, false, Lost, Want::Refused("lost")),
        ("pg slot invalidated, when_needed", Postgres, Some(p.clone()), None, WhenNeeded, false, Lost, plan("none", Some(p.clone()), false, true)),
        ("pg slot invalidated mid-snapshot, when_needed", Postgres, Some(p_row.clone()), None, WhenNeeded, false, Lost, plan("none", None, false, true)),
        // The binlog is purged.
        ("my binlog purged", Mysql, Some(m.clone()), None, Initial, false, Lost, Want::Refused("lost")),
        ("my binlog purged, always", Mysql, Some(m.clone()), None, Always, false, Lost, Want::Refused("lost")),
        ("my binlog purged, when_needed", Mysql, Some(m.clone()), None, WhenNeeded, false, Lost, plan("none", Some(m.clone()), false, true)),
        ("my snapshot's binlog purged, when_needed", Mysql, Some(m_row.clone()), None, WhenNeeded, false, Lost, plan("none", Some(m.clone()), false, true)),
        ("my joining sink, peers' snapshot binlog purged, when_needed", Mysql, None, Some(m_row.clone()), WhenNeeded, false, Lost, plan("none", Some(m.clone()), false, true)),
        // snapshot.mode always re-reads once per process.
        ("pg always, first start", Postgres, Some(p.clone()), None, Always, false, Held, plan("none", Some(p.clone()), true, false)),
        ("pg always, restart in the same process", Postgres, Some(p.clone()), None, Always, true, Held, plan("none", Some(p.clone()), false, false)),
        ("my always, first start", Mysql, Some(m.clone()), None, Always, false, Held, plan("none", Some(m.clone()), true, false)),
        ("my always, restart in the same process", Mysql, Some(m.clone()), None, Always, true, Held, plan("none", Some(m.clone()), false, false)),
        ("pg always, no checkpoint: an initial snapshot", Postgres, None, None, Always, false, Missing, plan("fresh", None, false, false)),
        ("my always, mid-snapshot: resume, then re-read", Mysql, Some(m_row.clone()), None, Always, false, Held, plan("resume", Some(m.clone()), true, false)),
        // Checkpoints from somewhere else.
        ("pg given a mysql checkpoint", Postgres, Some(m.clone()), None, Initial, false, Held, Want::Refused("foreign")),
        ("my given a postgres checkpoint", Mysql, Some(p.clone()), None, Initial, false, Held, Want::Refused("foreign")),
        ("my given a postgres snapshot row", Mysql, Some(p_row.clone()), None, Initial, false, Held, Want::Refused("foreign")),
        ("pg given a later generation's position", Postgres, Some(p.clone().in_generation(1)), None, Initial, false, Held, Want::Refused("foreign")),
    ];
    for (name, kind, checkpoint, highest, mode, started_once, log, want) in &cases {
        let input = StartInput {
            kind: *kind,
            checkpoint: checkpoint.as_ref(),
            highest_at_start: highest.as_ref(),
            mode: *mode,
            started_once: *started_once,
            log: *log,
        };
        assert_eq!(got(&input), *want, "{name}");
    }
}

#[test]
fn the_config_modes_map_one_to_one() {
    assert_eq!(SnapshotMode::from_config(false, false, false), Never);
    assert_eq!(SnapshotMode::from_config(true, false, false), Initial);
    assert_eq!(SnapshotMode::from_config(true, true, false), Always);
    assert_eq!(SnapshotMode::from_config(true, false, true), WhenNeeded);
}

#[test]
fn a_snapshot_checkpoint_passes_the_kind_check_of_either_source() {
    let row = row("t", &pg(1));
    assert!(check_checkpoint(Postgres, Some(&row)).is_ok());
    assert!(check_checkpoint(Mysql, Some(&row)).is_ok());
    assert!(check_checkpoint(Postgres, None).is_ok());
    let Err(Refusal::Foreign(err)) = check_checkpoint(Mysql, Some(&pg(1))) else {
        panic!("a postgres position passed")
    };
    assert!(err.to_string().contains("was not written by a mysql source"), "{err}");
}
