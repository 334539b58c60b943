//! A status line under the logs on a terminal, showing each running
//! snapshot's table, rows, rate and time left. Log lines clear it, print,
//! and put it back, so the two never mix.

use sluice_core::sync::lock;
use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use sluice_core::snapshot::progress::{TableProgress, running};
use tracing_subscriber::fmt::MakeWriter;

/// The status line now on the terminal; empty when none is shown.
static SHOWN: Mutex<String> = Mutex::new(String::new());
const CLEAR: &str = "\r\x1b[K";

/// Writes each log line above the status line.
pub struct StatusWriter;

impl<'a> MakeWriter<'a> for StatusWriter {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine(Vec::new())
    }
}

/// One formatted log line, printed whole when dropped, with credentials
/// masked: this is where every log line passes, client libraries' own
/// (async-nats logs its server URL at debug) included.
pub struct LogLine(Vec<u8>);

impl Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0);
        let line = sluice_core::redact::credentials(&line);
        let shown = lock(&SHOWN);
        let mut err = std::io::stderr().lock();
        // A log line that cannot be written has nowhere else to go.
        let _ = if shown.is_empty() {
            err.write_all(line.as_bytes())
        } else {
            err.write_all(CLEAR.as_bytes())
                .and_then(|()| err.write_all(line.as_bytes()))
                .and_then(|()| err.write_all(shown.as_bytes()))
        };
        let _ = err.flush();
    }
}

/// Redraws the status line every second, for the life of the process.
pub fn start() {
    let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).unwrap_or(80usize);
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let line = status_line(&running(), width.saturating_sub(1));
            let mut shown = lock(&SHOWN);
            if line == *shown {
                continue;
            }
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(CLEAR.as_bytes()).and_then(|()| err.write_all(line.as_bytes()));
            let _ = err.flush();
            *shown = line;
        }
    });
}

/// `snapshot shop.orders (1/3) 1234000/5000000 rows 24% 240000/s ETA 16s`
/// per running snapshot, cut to `width` characters so it never wraps.
fn status_line(running: &[TableProgress], width: usize) -> String {
    let parts: Vec<String> = running
        .iter()
        .map(|p| {
            let kind = if p.incremental { "incremental snapshot" } else { "snapshot" };
            let mut part = format!("{kind} {} ({}/{}) {}", p.table, p.tables_done + 1, p.tables, p.rows);
            if p.estimated_rows > 0 {
                let percent = (p.rows as f64 * 100.0 / p.estimated_rows as f64).min(100.0);
                part.push_str(&format!("/{} rows {percent:.0}%", p.estimated_rows));
            } else {
                part.push_str(" rows");
            }
            part.push_str(&format!(" {}/s", p.rows_per_sec));
            if let Some(eta) = p.eta_secs {
                part.push_str(&format!(" ETA {}", duration(eta)));
            }
            part
        })
        .collect();
    parts.join(" | ").chars().take(width).collect()
}

fn duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(table: &str, rows: u64, estimated_rows: u64, eta_secs: Option<u64>) -> TableProgress {
        TableProgress {
            source: "s".into(),
            incremental: false,
            table: table.into(),
            tables_done: 0,
            tables: 3,
            rows,
            estimated_rows,
            rows_per_sec: 240_000,
            eta_secs,
        }
    }

    #[test]
    fn the_line_shows_rows_share_rate_and_time_left_and_never_wraps() {
        assert_eq!(
            status_line(&[at("shop.orders", 1_250_000, 5_000_000, Some(3725))], 200),
            "snapshot shop.orders (1/3) 1250000/5000000 rows 25% 240000/s ETA 1h02m"
        );
        assert_eq!(
            status_line(&[at("a.b", 10, 0, None), at("c.d", 5, 10, Some(75))], 200),
            "snapshot a.b (1/3) 10 rows 240000/s | snapshot c.d (1/3) 5/10 rows 50% 240000/s ETA 1m15s"
        );
        assert_eq!(status_line(&[at("shop.orders", 1, 5, Some(1))], 20).chars().count(), 20);
        assert_eq!(status_line(&[], 80), "");
    }
}
