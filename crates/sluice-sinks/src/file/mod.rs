//! The file sink: JSON Lines in one local file, exactly-once.
//!
//! Every line carries its event's position, so the file is its own
//! checkpoint. A batch is appended with one write and then fsynced; only
//! then is it reported durable. On open (start, or recovery after a failed
//! write) the sink cuts any torn last line and reports the position of the
//! last whole line, and the coordinator hands it only later events. So a
//! kill -9 at any instruction leaves every event in the file exactly once.

mod recover;
mod sink;

pub use sink::FileSink;

/// Whether `path` could be created, checked without writing anything: the
/// nearest existing ancestor must be a directory, and the path itself must
/// not be one.
pub fn preflight(path: &std::path::Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("{} is a directory; point path at a file inside it", path.display()));
    }
    let mut ancestor = path.parent();
    while let Some(dir) = ancestor {
        if dir.as_os_str().is_empty() {
            return Ok(());
        }
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {
                if meta.permissions().readonly() {
                    return Err(format!("{} is read-only; choose a writable location", dir.display()));
                }
                return Ok(());
            }
            Ok(_) => {
                return Err(format!(
                    "{} cannot be created because {} is not a directory; choose another path",
                    path.display(),
                    dir.display()
                ));
            }
            Err(_) => ancestor = dir.parent(),
        }
    }
    Ok(())
}
