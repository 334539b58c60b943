//! Checkpoint stores. See [`sluice_core::CheckpointStore`] for the contract.

mod embedded;
mod memory;

pub use embedded::{EmbeddedStore, STORE_FILE_NAME};
pub use memory::MemoryStore;

#[cfg(test)]
mod tests {
    use sluice_core::{CheckpointKey, CheckpointStore, Position, StoreError};

    use super::*;

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
