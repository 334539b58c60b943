//! A shutdown signal that many tasks can wait on.

use std::sync::Arc;

use tokio::sync::watch;

/// Once triggered, stays triggered.
#[derive(Debug, Clone)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }

    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once triggered (at once if it already was).
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // Only fails if the sender is gone, and we hold it.
        let _ = rx.wait_for(|triggered| *triggered).await;
    }
}

/// Triggers the shutdown when dropped unless disarmed, so a task that
/// fails or panics takes the rest of its pipeline down in order.
pub(crate) struct TriggerOnDrop(pub Option<Shutdown>);

impl TriggerOnDrop {
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for TriggerOnDrop {
    fn drop(&mut self) {
        if let Some(shutdown) = &self.0 {
            shutdown.trigger();
        }
    }
}
