use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The data dir when `--data-dir` is not given.
pub const DEFAULT_DATA_DIR: &str = "./sluice-data";
/// Where the HTTP API listens by default: loopback only, so nothing is
/// exposed beyond the host until an operator says so.
pub const DEFAULT_API_ADDR: &str = "127.0.0.1:8080";

/// `--version`: the crate version and the git commit it was built from
/// (build.rs).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("SLUICE_GIT_COMMIT"), ")");

/// Sluice: change data capture with a checkpoint per sink.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version = VERSION,
    about = "Change data capture from PostgreSQL and MySQL/MariaDB into many sinks, with a checkpoint per sink"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `sluice_runtime=debug,info`; RUST_LOG wins when set.
    #[arg(long, global = true, default_value = "info")]
    pub log_level: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the pipelines of a config until their sources end or a signal arrives.
    Run(ServeArgs),
    /// Show where each pipeline and sink of a running `sluice run` stands.
    Status(StatusArgs),
    /// Check a config without running it, and show each sink's guarantee.
    Validate(ValidateArgs),
    /// Inspect or reset stored checkpoints.
    Checkpoints(CheckpointsArgs),
    /// Inspect or purge the dead letter queue: events a sink can never take.
    Dlq(DlqArgs),
    /// Re-read one table while its pipeline streams (an incremental snapshot).
    Snapshot(SnapshotArgs),
    /// Act on the sinks of a running `sluice run` through its API.
    Sinks(SinksArgs),
    /// Print the completion script for a shell, e.g.
    /// `sluice completions bash > /etc/bash_completion.d/sluice`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page, or write one page per command into a folder.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `sluice.1` and a `sluice-<command>.1` for each command here,
    /// instead of printing `sluice.1`.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SinksArgs {
    #[command(subcommand)]
    pub action: SinksAction,
}

#[derive(Debug, Subcommand)]
pub enum SinksAction {
    /// Probe a detached optional sink now; once it answers it catches up
    /// from its buffer, or by a re-read of the source.
    Reattach {
        /// The API address of the running `sluice run`.
        #[arg(long, env = "SLUICE_API_ADDR", default_value = DEFAULT_API_ADDR)]
        api_addr: String,
        /// The pipeline's name.
        #[arg(long)]
        pipeline: String,
        /// The sink's id.
        #[arg(long)]
        sink: String,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Where the HTTP API (health, metrics, dashboard) listens; `off` runs without it.
    #[arg(long, env = "SLUICE_API_ADDR", default_value = DEFAULT_API_ADDR)]
    pub api_addr: String,
    /// Host names the API answers to besides its address (and `localhost`
    /// on loopback), comma-separated, e.g. `sluice.internal,proxy:443`.
    /// Any other `Host` header is refused, which stops DNS rebinding.
    #[arg(long, env = "SLUICE_API_ALLOWED_HOSTS", value_delimiter = ',')]
    pub api_allowed_hosts: Vec<String>,
    /// Share the config's pipelines with the other instances that run it
    /// with --fleet, through leases in the PostgreSQL store (`store:`) or
    /// in etcd (`fleet:`). SIGHUP then reads the config again: added
    /// pipelines start, removed ones stop, the others run on.
    #[arg(long, env = "SLUICE_FLEET")]
    pub fleet: bool,
    /// This instance's name in the fleet; by default the host name and the
    /// process id.
    #[arg(long, env = "SLUICE_INSTANCE_ID", requires = "fleet")]
    pub instance_id: Option<String>,
    /// Threads of the runtime that runs the pipelines' tasks (1 to 1024);
    /// by default one per CPU. On two cores, one thread ran generator and
    /// PostgreSQL pipelines as fast with a quarter less CPU and memory, and
    /// MySQL pipelines a quarter slower (docs/deploy.md).
    #[arg(long, env = "SLUICE_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The API address of the running `sluice run`.
    #[arg(long, env = "SLUICE_API_ADDR", default_value = DEFAULT_API_ADDR)]
    pub api_addr: String,
    /// Only this pipeline.
    #[arg(long)]
    pub pipeline: Option<String>,
    /// Print the API's JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Redraw every this many seconds until interrupted.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
    pub watch: Option<u64>,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The table, as the source names it (schema.table).
    #[arg(long)]
    pub table: String,
    /// Only this pipeline; by default every pipeline whose source reads the table.
    #[arg(long)]
    pub pipeline: Option<String>,
    /// Follow the snapshot through the running instance's API until it
    /// ends, with a progress line; exits 0 once every table is read, 2 when
    /// one is refused.
    #[arg(long)]
    pub wait: bool,
    /// The API address of the running `sluice run`, for --wait.
    #[arg(long, env = "SLUICE_API_ADDR", default_value = DEFAULT_API_ADDR)]
    pub api_addr: String,
}

#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    pub action: DlqAction,
}

#[derive(Debug, Subcommand)]
pub enum DlqAction {
    /// One line per dead letter: key, sink, why.
    List {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// One dead letter in full, with its event.
    Show {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        api: ApiArgs,
        /// The key `sluice dlq list` prints.
        key: String,
    },
    /// Send dead letters to their sink again; delivered ones leave the
    /// queue. While `sluice run` holds the data dir, its running sinks
    /// redeliver them, asked through its API.
    Retry {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        api: ApiArgs,
        /// Keys to retry; or --all.
        key: Vec<String>,
        #[arg(long)]
        all: bool,
    },
    /// Delete dead letters.
    Purge {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        api: ApiArgs,
        /// Keys to delete; or --all.
        key: Vec<String>,
        #[arg(long)]
        all: bool,
        /// Confirm: purged events are gone for good.
        #[arg(long)]
        yes: bool,
    },
}

/// Where `sluice dlq` and `sluice checkpoints list` turn when a running
/// `sluice run` holds the data dir.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The API of the `sluice run` that holds --data-dir, asked when the
    /// store is locked by it.
    #[arg(long, env = "SLUICE_API_ADDR", default_value = DEFAULT_API_ADDR)]
    pub api_addr: String,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Also reach each source and sink and check what a first run needs of
    /// it, one line per check with the fix for each failure; exits 2 when
    /// one fails. Nothing is written.
    #[arg(long)]
    pub connect: bool,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// A pipeline file, or a folder of .yaml/.yml files.
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Where the checkpoint store lives.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CheckpointsArgs {
    #[command(subcommand)]
    pub action: CheckpointsAction,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointsAction {
    /// Show each sink's stored checkpoint; through the running instance's
    /// API when `sluice run` holds the data dir.
    List {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Delete stored checkpoints so the sinks start again from the source's beginning.
    Reset(ResetArgs),
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Only this pipeline.
    #[arg(long)]
    pub pipeline: Option<String>,
    /// Only this sink (by id).
    #[arg(long)]
    pub sink: Option<String>,
    /// Confirm: sinks that do not store their own position will receive their events again.
    #[arg(long)]
    pub yes: bool,
}
