use std::io::IsTerminal;

use anyhow::anyhow;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Logs go to stderr; stdout belongs to command output and the stdout sink.
/// RUST_LOG, when set, wins over `--log-level`.
pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) => EnvFilter::try_new(&spec).map_err(|e| anyhow!("RUST_LOG={spec:?} is not a log filter: {e}"))?,
        Err(_) => EnvFilter::try_new(level)
            .map_err(|e| anyhow!("--log-level {level:?} is not a log filter: {e}; hint: use e.g. info or debug"))?,
    };
    let terminal = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(terminal);
    match format {
        // On a terminal, a status line under the logs shows snapshot progress.
        LogFormat::Text if terminal => {
            builder.with_writer(crate::status::StatusWriter).init();
            crate::status::start();
        }
        // The same writer off a terminal (no status line is drawn then):
        // it masks credentials in every line.
        LogFormat::Text => builder.with_writer(crate::status::StatusWriter).init(),
        LogFormat::Json => builder.with_writer(crate::status::StatusWriter).json().init(),
    }
    Ok(())
}
