//! The `sluice` binary: parses the command line and hands over to the
//! commands. Exit codes: 0 done, 1 a pipeline failed while running, 2 the
//! config or the environment is unusable (nothing was written).

mod api;
mod assemble;
mod checkpoints;
mod cli;
mod connect;
mod dlq;
mod fleet;
mod logging;
mod man;
mod reload;
mod remote;
mod run;
mod snapshot;
mod status;
mod status_cli;
mod validate;

use std::process::ExitCode;

use clap::Parser;

/// Change events are many small allocations freed on other threads;
/// mimalloc handles that pattern with far less overhead than glibc malloc.
/// It also replaces `malloc` for the C libraries (the `override` feature):
/// librdkafka allocates each message and its headers on the sink's thread
/// and frees them on its delivery thread, and in glibc that pattern took a
/// tenth of a Kafka run's time.
///
/// Version 2 of mimalloc (the `v2` feature), not 3: in a drain, batches of
/// events are freed wholesale on the writer's thread while the reader's
/// thread allocates the next ones, and version 3 kept the freed pages
/// resident for longer. Measured on one backlog, v2 against v3: peak RSS
/// of MariaDB → file 112 against 159–182 MB, PostgreSQL → Kafka 138
/// against 196 MB, with throughput 10 to 30 % higher on those paths and
/// 9 % lower on generator → file (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use cli::{Cli, Command};

/// A failure before any pipeline started: config, paths, data dir.
pub const EXIT_BAD_INPUT: u8 = 2;
/// A pipeline stopped on an error it could not retry.
pub const EXIT_PIPELINE_FAILED: u8 = 1;

/// mimalloc asks the kernel for transparent huge pages on the memory it
/// maps, and a 2 MiB page stays resident while any 4 KiB of it is in use.
/// With them, peak RSS of a drain measured 10 to 20 % higher (MariaDB →
/// file 135–153 against 119–130 MB, a PostgreSQL snapshot 189–214 against
/// 167–174 MB) at the same speed (docs/benchmarks.md). The flag holds for
/// the whole process, including memory mapped before `main`.
fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::thread::disable_transparent_huge_pages(true) {
        // Only memory is at stake; the kernel may predate the flag.
        eprintln!("note: could not turn transparent huge pages off: {error}");
    }
}

/// mimalloc gives pages freed by a drain's writer back to the kernel 2 ms
/// after they empty rather than its default 10 ms (arenas: 20 ms rather
/// than 100), so the reader's next batches reuse fewer of them before
/// they go. Peak RSS of MariaDB → file, 1M rows, over nine interleaved
/// rounds each: 87–100 against 103–116 MB, for about 5 % more CPU
/// (docs/benchmarks.md). `MIMALLOC_PURGE_DELAY`, when set, wins.
fn purge_sooner() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() || std::env::var_os("MIMALLOC_RESET_DELAY").is_some() {
        return;
    }
    mimalloc_option::set(mimalloc_option::PURGE_DELAY, 2);
}

/// mimalloc's option calls, which the `mimalloc` crate does not expose
/// without the `extended` feature (and its `cty` dependency) and whose
/// option list there stops short of the purge delay.
mod mimalloc_option {
    use std::ffi::{c_int, c_long};

    /// `mi_option_purge_delay` in version 2's `mi_option_e` (the test
    /// below holds the index to the option's default of 10 ms).
    pub const PURGE_DELAY: c_int = 15;

    #[allow(unsafe_code)]
    unsafe extern "C" {
        fn mi_option_set(option: c_int, value: c_long);
        #[cfg(test)]
        fn mi_option_get(option: c_int) -> c_long;
    }

    pub fn set(option: c_int, value: c_long) {
        // SAFETY: plain integers; mimalloc ignores an option index out of
        // its range, and an option may be set at any time.
        #[allow(unsafe_code)]
        unsafe {
            mi_option_set(option, value)
        }
    }

    #[cfg(test)]
    pub fn get(option: c_int) -> c_long {
        // SAFETY: as for `set`.
        #[allow(unsafe_code)]
        unsafe {
            mi_option_get(option)
        }
    }

    #[test]
    fn the_purge_delay_is_the_option_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() && std::env::var_os("MIMALLOC_RESET_DELAY").is_none() {
            assert_eq!(get(PURGE_DELAY), 10, "mimalloc 2's default purge delay");
        }
        set(PURGE_DELAY, 2);
        assert_eq!(get(PURGE_DELAY), 2);
    }
}

fn main() -> ExitCode {
    without_huge_pages();
    purge_sooner();
    let cli = Cli::parse();
    if let Err(error) = logging::init(cli.log_format, &cli.log_level) {
        eprintln!("error: {error:#}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Status(args) => status_cli::status(args),
        Command::Validate(args) => validate::validate(args),
        Command::Checkpoints(args) => checkpoints::checkpoints(args),
        Command::Dlq(args) => dlq::dlq(args),
        Command::Snapshot(args) => snapshot::snapshot(args),
        Command::Sinks(args) => status_cli::sinks(args),
        Command::Completions { shell } => man::completions(shell),
        Command::Man(args) => man::man(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            // Our errors carry their causes in their own text already.
            let text = failure.error.to_string();
            eprintln!("error: {}", sluice_core::redact::credentials(&text));
            ExitCode::from(failure.code)
        }
    }
}

/// An error and the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Self { code: EXIT_BAD_INPUT, error: error.into() }
    }

    pub fn pipeline(error: impl Into<anyhow::Error>) -> Self {
        Self { code: EXIT_PIPELINE_FAILED, error: error.into() }
    }
}
