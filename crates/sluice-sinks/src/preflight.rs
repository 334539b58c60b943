//! Checks shared by the sinks' `preflight`.

use std::path::Path;

#[cfg(any(feature = "redis", feature = "nats", feature = "http", feature = "s3"))]
use sluice_core::SinkError;
use sluice_core::preflight::Check;

/// Whether the sink can create `path`: a file can be made in its nearest
/// existing folder (missing folders are created at the first run). The
/// probe file is removed again.
pub fn writable_dir(name: &str, path: &Path) -> Check {
    let mut dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    while !dir.exists() {
        dir = dir.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    }
    if !dir.is_dir() {
        return Check::fail(
            name,
            format!("{}: {} is a file, not a folder", path.display(), dir.display()),
            "point the sink at a path under a folder",
        );
    }
    let probe = dir.join(format!(".sluice-validate-{}", std::process::id()));
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Check::ok(name, format!("{} can be written", path.display()))
        }
        Err(e) => Check::fail(
            name,
            format!("cannot create a file in {}: {e}", dir.display()),
            "give the user sluice runs as write access to the folder, or point the sink elsewhere",
        ),
    }
}

/// A sink call's result as a check: a permanent error brings its own fix.
#[cfg(any(feature = "redis", feature = "nats", feature = "http", feature = "s3"))]
pub fn outcome<T>(name: &str, result: Result<T, SinkError>, ok: &str, fix: &str) -> Check {
    let with_cause = |detail: String, cause: Option<&sluice_core::BoxError>| match cause {
        Some(cause) => format!("{detail}: {cause}"),
        None => detail,
    };
    match result {
        Ok(_) => Check::ok(name, ok),
        Err(SinkError::Permanent { detail, hint, cause }) => {
            Check::fail(name, with_cause(detail, cause.as_ref()), hint)
        }
        Err(SinkError::Transient { detail, cause }) => Check::fail(name, with_cause(detail, cause.as_ref()), fix),
        Err(e) => Check::fail(name, e.to_string(), fix),
    }
}
