//! Failpoints for crash tests: `SLUICE_FAILPOINT=name=N` aborts the process
//! (no cleanup, like SIGKILL) the N-th time code passes `hit("name")`.
//! Without the variable a hit costs one relaxed atomic load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Armed {
    name: String,
    at: u64,
    hits: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("SLUICE_FAILPOINT").ok()?;
            let (name, at) = spec.split_once('=')?;
            Some(Armed { name: name.to_string(), at: at.parse().ok()?, hits: AtomicU64::new(0) })
        })
        .as_ref()
}

/// Whether `name` is the armed failpoint, for code that must settle what
/// it has in flight before the hit, so the crash leaves it in place.
pub fn armed_for(name: &str) -> bool {
    armed().is_some_and(|armed| armed.name == name)
}

/// Aborts the process if this is the armed failpoint's N-th hit.
pub fn hit(name: &str) {
    if let Some(armed) = armed()
        && armed.name == name
        && armed.hits.fetch_add(1, Ordering::Relaxed) + 1 == armed.at
    {
        eprintln!("failpoint {name} hit; aborting");
        std::process::abort();
    }
}
