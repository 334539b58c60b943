//! Capped exponential backoff for retries.

use std::time::Duration;

/// First retry delay: short, since most failures are blips.
pub const RETRY_INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest delay between retries: a server that is down for long is still
/// probed twice a minute.
pub const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// The delay before the next retry; each call doubles it up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.min(16));
        self.attempt += 1;
        RETRY_INITIAL_BACKOFF.saturating_mul(factor).min(RETRY_MAX_BACKOFF)
    }

    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut backoff = Backoff::default();
        let delays: Vec<_> = (0..12).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays[..4], [100, 200, 400, 800]);
        assert!(delays.iter().all(|d| *d <= 30_000));
        assert_eq!(*delays.last().unwrap(), 30_000);
        backoff.reset();
        assert_eq!(backoff.next_delay().as_millis(), 100);
    }
}
