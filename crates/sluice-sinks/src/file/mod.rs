//! The file sink: JSON Lines in one local file, exactly-once.
//!
//! Every line carries its event's position, so the file is its own
//! checkpoint. A thread of the sink's own appends each batch with one
//! write while the next batch encodes, and fsyncs once for the batches
//! that queued meanwhile; only after the fsync is a batch reported
//! durable. On open (start, or recovery after a failed
//! write) the sink cuts any torn last line and reports the position of the
//! last whole line, and the coordinator hands it only later events. So a
//! kill -9 at any instruction leaves every event in the file exactly once.
//! In a foreign envelope (Debezium, CloudEvents) the lines carry no
//! position, and a mark beside the file does the same job (`mark`).

mod appender;
mod config;
mod mark;
mod recover;
mod sink;

pub use config::FileSinkConfig;
pub use sink::FileSink;

pub fn build(config: &FileSinkConfig, _context: &crate::SinkContext) -> Box<dyn sluice_core::Sink> {
    Box::new(FileSink::with_format(&config.id, &config.path, &config.format))
}

/// Whether `path` could be created, checked without writing anything: the
/// path must not be a directory or a read-only file, and the nearest
/// existing ancestor must be a directory this process may write.
pub fn preflight(path: &std::path::Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{} is a directory; point path at a file inside it", path.display()));
    }
    if std::fs::metadata(path).is_ok() && !writable(path) {
        return Err(format!("{} is read-only; make it writable or choose another path", path.display()));
    }
    writable_folder(path.parent().unwrap_or(std::path::Path::new("")), path)
}

/// Whether files could be created in `dir` (made on demand): its nearest
/// existing ancestor, the working dir for a relative path, must be a
/// directory this process may write. `target` names what is checked.
pub fn writable_folder(dir: &std::path::Path, target: &std::path::Path) -> Result<(), String> {
    let mut ancestor = Some(dir);
    while let Some(dir) = ancestor {
        let shown = if dir.as_os_str().is_empty() { std::path::Path::new(".") } else { dir };
        match std::fs::metadata(shown) {
            Ok(meta) if meta.is_dir() => {
                if !writable(shown) {
                    return Err(format!(
                        "{} cannot be written because {} is read-only; make it writable or choose a writable location",
                        target.display(),
                        shown.display()
                    ));
                }
                return Ok(());
            }
            Ok(_) => {
                return Err(format!(
                    "{} cannot be created because {} is not a directory; choose another path",
                    target.display(),
                    shown.display()
                ));
            }
            Err(_) => ancestor = dir.parent(),
        }
    }
    Ok(())
}

/// Read-only by its mode bits (which refuse even root, for whom the
/// kernel would allow the write), or for this process (another owner, a
/// read-only mount), as `access(2)` answers it; a folder also needs
/// search permission for a file to be created in it.
fn writable(path: &std::path::Path) -> bool {
    use rustix::fs::{Access, access};
    let by_mode = std::fs::metadata(path).is_ok_and(|meta| !meta.permissions().readonly());
    let needed = if path.is_dir() { Access::WRITE_OK | Access::EXEC_OK } else { Access::WRITE_OK };
    by_mode && access(path, needed).is_ok()
}
