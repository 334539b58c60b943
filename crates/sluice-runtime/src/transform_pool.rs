//! Threads that run a long batch's transforms beside the dispatcher.
//!
//! Started on first use and kept for the life of the process. A thread
//! made for each batch started with an empty allocator heap, so every row
//! it rewrote went into fresh pages, and making it cost more than a short
//! batch's steps.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use sluice_core::Event;
use sluice_transform::{StepError, Transforms, Verdict};

type Verdicts = Vec<Result<Verdict, StepError>>;

/// A part back from a helper, or what its steps panicked with.
type Done = std::thread::Result<(Vec<Event>, Verdicts)>;

/// Batches shorter than this run their transforms on the caller's thread
/// alone: handing a part over costs more than it saves on a few events.
const PARALLEL_EVENTS: usize = 2048;

/// A part of a batch for a helper, and where to send it back.
struct Job {
    transforms: Arc<Transforms>,
    events: Vec<Event>,
    done: Sender<Done>,
}

impl Job {
    fn run(mut self) {
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| self.transforms.apply_all(&mut self.events)));
        let _ = self.done.send(ran.map(|verdicts| (self.events, verdicts)));
    }
}

struct Pool {
    jobs: Mutex<Sender<Job>>,
    helpers: usize,
}

/// One helper per core beyond the caller's, up to seven; none on one core.
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from).min(8);
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut helpers = 0;
        for index in 1..cores {
            let queue = Arc::clone(&queue);
            let thread = std::thread::Builder::new().name(format!("sluice-transforms-{index}"));
            if thread.spawn(move || serve(&queue)).is_ok() {
                helpers += 1;
            }
        }
        (helpers > 0).then(|| Pool { jobs: Mutex::new(jobs), helpers })
    })
    .as_ref()
}

fn serve(queue: &Mutex<Receiver<Job>>) {
    loop {
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        job.run();
    }
}

/// Each event's verdict, in order. A long batch is split across the
/// machine's cores (the steps hold no per-event state, so the order in
/// which events pass them changes nothing), so a costly step (a script)
/// does not hold the pipeline to one core. A step that panics on a
/// helper panics here, as it would have on this thread.
pub(crate) fn apply_all(transforms: &Arc<Transforms>, events: &mut Vec<Event>) -> Verdicts {
    let pool = match pool() {
        Some(pool) if events.len() >= PARALLEL_EVENTS => pool,
        _ => return transforms.apply_all(events),
    };
    let part = events.len().div_ceil(pool.helpers + 1);
    let mut rest = events.split_off(part);
    let mut replies = Vec::with_capacity(pool.helpers);
    while !rest.is_empty() {
        let tail = rest.split_off(part.min(rest.len()));
        let events = std::mem::replace(&mut rest, tail);
        let (done, reply) = mpsc::channel();
        let job = Job { transforms: Arc::clone(transforms), events, done };
        let jobs = pool.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // With no helper left to take it, the part runs here.
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            job.run();
        }
        replies.push(reply);
    }
    let mut verdicts = transforms.apply_all(events);
    for reply in replies {
        match reply.recv() {
            Ok(Ok((part, part_verdicts))) => {
                events.extend(part);
                verdicts.extend(part_verdicts);
            }
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(mpsc::RecvError) => unreachable!("a job always answers: its helper catches the panic of a step"),
        }
    }
    verdicts
}
