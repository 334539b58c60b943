//! Locks that outlive a panic.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking the value even if a thread panicked while holding
/// it. Every value Sluice keeps behind a mutex is a figure or a queue that
/// a panic cannot leave half-written, so refusing it would only turn one
/// failed task into a stuck pipeline.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
