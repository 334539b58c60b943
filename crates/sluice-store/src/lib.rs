//! Checkpoint stores. See [`sluice_core::CheckpointStore`] for the contract.

mod embedded;
mod memory;
mod postgres;

pub use embedded::{EmbeddedStore, STORE_FILE_NAME};
pub use memory::MemoryStore;
pub use postgres::{FencedStore, Lease, LeaseRow, PgStore, PgStoreOptions, Taken, preflight as pg_preflight};

use sluice_core::{CheckpointStore, DeadLetterQueue, StateDir};

/// Everything a running Sluice keeps: the checkpoints, the dead letters and
/// the sources' and pipelines' named state, in one place.
pub trait Store: CheckpointStore + DeadLetterQueue {
    /// The root of the named state.
    fn state(&self) -> StateDir;
    /// Where the store is, for messages (a path, or a server and schema).
    fn describe(&self) -> String;
}

impl Store for EmbeddedStore {
    fn state(&self) -> StateDir {
        StateDir::files(self.data_dir())
    }

    fn describe(&self) -> String {
        self.data_dir().display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::{CheckpointKey, CheckpointStore, Position, StateDir, StoreError};

    use super::*;

    pub(crate) fn contract_of(store: &dyn CheckpointStore) {
        contract(store)
    }
    pub(crate) fn dead_letter_contract_of(queue: &dyn sluice_core::DeadLetterQueue) {
        dead_letter_contract(queue)
    }
    pub(crate) fn state_contract_of(dir: &StateDir) {
        state_contract(dir)
    }

    fn at(tx: u64) -> Position {
        Position::Generator { tx, seq: 0 }
    }

    /// The contract every store keeps.
    fn contract(store: &dyn CheckpointStore) {
        let a = CheckpointKey::new("src", "a");
        let b = CheckpointKey::new("src", "b");
        assert_eq!(store.load(&[a.clone(), b.clone()]).unwrap(), vec![None, None]);
        store.commit(&[(a.clone(), at(5)), (b.clone(), at(3))]).unwrap();
        assert_eq!(store.load(&[a.clone(), b.clone()]).unwrap(), vec![Some(at(5)), Some(at(3))]);
        // One regressing key fails the whole commit: b must not move either.
        let err = store.commit(&[(b.clone(), at(9)), (a.clone(), at(4))]).unwrap_err();
        assert!(matches!(err, StoreError::Regression { .. }), "{err}");
        assert_eq!(store.load(&[a.clone(), b.clone()]).unwrap(), vec![Some(at(5)), Some(at(3))]);
        store.commit(&[(a.clone(), at(5))]).unwrap();
        assert_eq!(
            store.list().unwrap(),
            vec![("src::sink::a".to_string(), at(5)), ("src::sink::b".to_string(), at(3))]
        );
        assert_eq!(store.remove(&[b.clone(), CheckpointKey::new("src", "zzz")]).unwrap(), 1);
        store.commit(&[(b.clone(), at(1))]).unwrap();
        assert_eq!(store.load(std::slice::from_ref(&b)).unwrap(), vec![Some(at(1))]);

        // A source reset removes its keys and moves it to the next
        // generation; other sources keep theirs.
        let other = CheckpointKey::new("other", "a");
        store.commit(&[(other.clone(), at(2))]).unwrap();
        assert_eq!(store.generation("src").unwrap(), 0);
        assert_eq!(store.reset_source("src", &[a.clone(), b.clone()]).unwrap(), (2, 1));
        assert_eq!(store.load(&[a.clone(), b.clone(), other.clone()]).unwrap(), vec![None, None, Some(at(2))]);
        assert_eq!((store.generation("src").unwrap(), store.generation("other").unwrap()), (1, 0));
        assert_eq!(store.reset_source("src", &[a]).unwrap(), (0, 2));
        assert_eq!(store.generation("src").unwrap(), 2);
    }

    #[test]
    fn memory_store_keeps_the_contract() {
        contract(&MemoryStore::new());
    }

    #[test]
    fn embedded_store_keeps_the_contract_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            contract(&store);
        }
        let reopened = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(reopened.list().unwrap().len(), 1);
        assert_eq!(reopened.generation("src").unwrap(), 2, "the generation is durable");
    }

    fn letter(key: &str, at: i64) -> sluice_core::DeadLetter {
        sluice_core::DeadLetter {
            key: key.into(),
            source_id: "s".into(),
            sink_id: "k".into(),
            position: "gen:1:0".into(),
            error: "too large".into(),
            event: "{}".into(),
            encoded: String::new(),
            recorded_at_us: at,
        }
    }

    fn dead_letter_contract(queue: &dyn sluice_core::DeadLetterQueue) {
        queue.put(&letter("a", 1), 2, false).unwrap();
        queue.put(&letter("b", 2), 2, false).unwrap();
        assert!(matches!(queue.put(&letter("c", 3), 2, false), Err(StoreError::DeadLetterQueueFull { max: 2 })));
        queue.put(&letter("c", 3), 2, true).unwrap();
        let keys: Vec<String> = queue.letters().unwrap().into_iter().map(|l| l.key).collect();
        assert_eq!(keys, ["b", "c"], "the oldest went");
        assert_eq!(queue.purge(&["b".into(), "zz".into()]).unwrap(), 1);
        assert_eq!(queue.letters().unwrap().len(), 1);
    }

    #[test]
    fn dead_letter_queues_keep_the_contract() {
        dead_letter_contract(&MemoryStore::new());
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert!(sluice_core::DeadLetterQueue::letters(&store).unwrap().is_empty());
        dead_letter_contract(&store);
    }

    /// The contract of the named state every store keeps.
    fn state_contract(dir: &StateDir) {
        let part = dir.child("source").child("a");
        assert_eq!(part.read("x").unwrap(), None);
        part.write("x", b"one").unwrap();
        part.write("x", b"it's \\ \x00 two").unwrap();
        assert_eq!(part.read("x").unwrap().as_deref(), Some(&b"it's \\ \x00 two"[..]));
        part.append_line("log", b"first").unwrap();
        part.append_line("log", b"second").unwrap();
        assert_eq!(part.read("log").unwrap().as_deref(), Some(&b"first\nsecond\n"[..]));
        assert_eq!(part.list().unwrap(), ["log", "x"]);
        assert!(part.remove("x").unwrap());
        assert!(!part.remove("x").unwrap());
        assert_eq!(part.list().unwrap(), ["log"]);
        assert!(dir.child("source").child("b").list().unwrap().is_empty());
        assert!(dir.child("source").list().unwrap().is_empty(), "only names one level down");
    }

    #[test]
    fn embedded_state_keeps_the_contract_in_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        state_contract(&store.state());
        assert!(dir.path().join("source/a/log").is_file(), "names are paths under the data dir");
    }

    #[test]
    fn a_second_open_of_the_same_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = EmbeddedStore::open(dir.path()).unwrap();
        let message = EmbeddedStore::open(dir.path()).err().expect("second open must fail").to_string();
        assert!(message.contains("another process"), "{message}");
    }

    #[test]
    fn an_unusable_data_dir_is_reported() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let message = EmbeddedStore::open(&file.path().join("sub")).err().unwrap().to_string();
        assert!(message.contains("cannot create the data dir"), "{message}");
    }
}
