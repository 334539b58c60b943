//! An in-memory store for tests, with a way to wait for a checkpoint
//! instead of sleeping.

use sluice_core::sync::lock;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use sluice_core::{CheckpointKey, CheckpointStore, DeadLetter, DeadLetterQueue, Position, StoreError};

/// Shared by clone-free reference (`Arc<MemoryStore>`); survives a
/// simulated crash of everything else, as a file on disk would.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<BTreeMap<String, Position>>,
    letters: Mutex<Vec<DeadLetter>>,
    generations: Mutex<BTreeMap<String, u32>>,
    changed: Condvar,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, key: &CheckpointKey) -> Option<Position> {
        self.lock().get(&key.to_string()).cloned()
    }

    /// Blocks until `key` is stored at or beyond `target`, or `timeout`
    /// passes; returns whether it got there.
    pub fn wait_for(&self, key: &CheckpointKey, target: &Position, timeout: Duration) -> bool {
        let key = key.to_string();
        let guard = self.lock();
        let (_guard, result) = self
            .changed
            .wait_timeout_while(guard, timeout, |state| state.get(&key).is_none_or(|p| p < target))
            .unwrap_or_else(PoisonError::into_inner);
        !result.timed_out()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Position>> {
        lock(&self.state)
    }
}

impl CheckpointStore for MemoryStore {
    fn load(&self, keys: &[CheckpointKey]) -> Result<Vec<Option<Position>>, StoreError> {
        let state = self.lock();
        Ok(keys.iter().map(|k| state.get(&k.to_string()).cloned()).collect())
    }

    fn list(&self) -> Result<Vec<(String, Position)>, StoreError> {
        Ok(self.lock().iter().map(|(k, p)| (k.clone(), p.clone())).collect())
    }

    fn commit(&self, updates: &[(CheckpointKey, Position)]) -> Result<(), StoreError> {
        let mut state = self.lock();
        for (key, position) in updates {
            if let Some(stored) = state.get(&key.to_string()).filter(|stored| *stored > position) {
                return Err(StoreError::Regression {
                    key: key.to_string(),
                    stored: stored.to_string(),
                    proposed: position.to_string(),
                });
            }
        }
        for (key, position) in updates {
            state.insert(key.to_string(), position.clone());
        }
        self.changed.notify_all();
        Ok(())
    }

    fn remove(&self, keys: &[CheckpointKey]) -> Result<usize, StoreError> {
        let mut state = self.lock();
        Ok(keys.iter().filter(|k| state.remove(&k.to_string()).is_some()).count())
    }

    fn generation(&self, source_id: &str) -> Result<u32, StoreError> {
        Ok(lock(&self.generations).get(source_id).copied().unwrap_or(0))
    }

    fn reset_source(&self, source_id: &str, keys: &[CheckpointKey]) -> Result<(usize, u32), StoreError> {
        // Both locks held: no reader sees the keys gone but the old generation.
        let mut state = self.lock();
        let mut generations = lock(&self.generations);
        let generation = generations.entry(source_id.to_string()).or_insert(0);
        *generation = generation.checked_add(1).ok_or_else(|| StoreError::Io {
            path: "memory".into(),
            detail: format!("source {source_id:?} is at the last log generation"),
            cause: None,
        })?;
        let removed = keys.iter().filter(|k| state.remove(&k.to_string()).is_some()).count();
        Ok((removed, *generation))
    }
}

impl DeadLetterQueue for MemoryStore {
    fn put(&self, letter: &DeadLetter, max_entries: usize, drop_oldest: bool) -> Result<(), StoreError> {
        let mut letters = lock(&self.letters);
        letters.retain(|l| l.key != letter.key);
        if letters.len() >= max_entries {
            if !drop_oldest {
                return Err(StoreError::DeadLetterQueueFull { max: max_entries });
            }
            letters.remove(0);
        }
        letters.push(letter.clone());
        Ok(())
    }

    fn letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(lock(&self.letters).clone())
    }

    fn purge(&self, keys: &[String]) -> Result<usize, StoreError> {
        let mut letters = lock(&self.letters);
        let before = letters.len();
        letters.retain(|l| !keys.contains(&l.key));
        Ok(before - letters.len())
    }
}
