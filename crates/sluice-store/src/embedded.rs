//! The embedded checkpoint store: one redb file on local disk.
//!
//! redb commits are ACID with copy-on-write pages and a checksummed
//! double-buffered commit slot, so a kill -9 (or power loss) during a commit
//! leaves either the previous or the new state, never a mix. The file is
//! locked while open, so two Sluice processes cannot share a data dir.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use sluice_core::{CheckpointKey, CheckpointStore, DeadLetter, DeadLetterQueue, Position, StoreError};

const CHECKPOINTS: TableDefinition<&str, &str> = TableDefinition::new("checkpoints");
const DEAD_LETTERS: TableDefinition<&str, &str> = TableDefinition::new("dead_letters");
/// Source id → its log generation; a source not listed is at 0.
const GENERATIONS: TableDefinition<&str, u32> = TableDefinition::new("generations");

/// The store file's name inside the data dir.
pub const STORE_FILE_NAME: &str = "checkpoints.redb";

pub struct EmbeddedStore {
    db: Database,
    path: PathBuf,
}

impl EmbeddedStore {
    /// Opens (creating if needed) `checkpoints.redb` in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let path = data_dir.join(STORE_FILE_NAME);
        std::fs::create_dir_all(data_dir).map_err(|e| io_error(&path, "cannot create the data dir", e))?;
        let db = Database::create(&path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse { path: path.display().to_string() },
            other => StoreError::Io {
                path: path.display().to_string(),
                detail: format!("cannot open: {other}"),
                cause: None,
            },
        })?;
        let store = Self { db, path };
        // Create the table up front so reads on a fresh store find it.
        store.write(|_| Ok(()))?;
        Ok(store)
    }

    /// The folder the store file is in, which keeps the named state too.
    pub fn data_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    fn error(&self, detail: &str, cause: impl Into<sluice_core::BoxError>) -> StoreError {
        io_error(&self.path, detail, cause)
    }

    fn write(
        &self,
        change: impl FnOnce(&mut redb::Table<&str, &str>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(|e| self.error("cannot begin a transaction", e))?;
        {
            let mut table = txn.open_table(CHECKPOINTS).map_err(|e| self.error("cannot open the table", e))?;
            change(&mut table)?;
        }
        txn.commit().map_err(|e| self.error("commit failed", e))
    }
}

fn io_error(path: &Path, detail: &str, cause: impl Into<sluice_core::BoxError>) -> StoreError {
    let cause = cause.into();
    StoreError::Io { path: path.display().to_string(), detail: format!("{detail}: {cause}"), cause: Some(cause) }
}

fn parse(key: &str, text: &str) -> Result<Position, StoreError> {
    text.parse().map_err(|_| StoreError::Corrupt { key: key.to_string(), text: text.to_string() })
}

impl CheckpointStore for EmbeddedStore {
    fn load(&self, keys: &[CheckpointKey]) -> Result<Vec<Option<Position>>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.error("cannot begin a read", e))?;
        let table = txn.open_table(CHECKPOINTS).map_err(|e| self.error("cannot open the table", e))?;
        keys.iter()
            .map(|key| {
                let key = key.to_string();
                let stored = table.get(key.as_str()).map_err(|e| self.error("read failed", e))?;
                stored.map(|text| parse(&key, text.value())).transpose()
            })
            .collect()
    }

    fn list(&self) -> Result<Vec<(String, Position)>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.error("cannot begin a read", e))?;
        let table = txn.open_table(CHECKPOINTS).map_err(|e| self.error("cannot open the table", e))?;
        let mut all = Vec::new();
        for entry in table.iter().map_err(|e| self.error("read failed", e))? {
            let (key, text) = entry.map_err(|e| self.error("read failed", e))?;
            all.push((key.value().to_string(), parse(key.value(), text.value())?));
        }
        Ok(all)
    }

    fn commit(&self, updates: &[(CheckpointKey, Position)]) -> Result<(), StoreError> {
        self.write(|table| {
            for (key, position) in updates {
                let key = key.to_string();
                let stored = table
                    .get(key.as_str())
                    .map_err(|e| self.error("read failed", e))?
                    .map(|text| parse(&key, text.value()))
                    .transpose()?;
                if let Some(stored) = stored.filter(|stored| stored > position) {
                    // Returning an error drops the transaction uncommitted.
                    return Err(StoreError::Regression {
                        key,
                        stored: stored.to_string(),
                        proposed: position.to_string(),
                    });
                }
                table.insert(key.as_str(), position.to_string().as_str()).map_err(|e| self.error("write failed", e))?;
            }
            Ok(())
        })
    }

    fn remove(&self, keys: &[CheckpointKey]) -> Result<usize, StoreError> {
        let mut removed = 0;
        self.write(|table| {
            for key in keys {
                if table.remove(key.to_string().as_str()).map_err(|e| self.error("delete failed", e))?.is_some() {
                    removed += 1;
                }
            }
            Ok(())
        })?;
        Ok(removed)
    }

    fn generation(&self, source_id: &str) -> Result<u32, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.error("cannot begin a read", e))?;
        let table = match txn.open_table(GENERATIONS) {
            Ok(table) => table,
            // Written by a version without generations: every source is at 0.
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(e) => return Err(self.error("cannot open the generations", e)),
        };
        let stored = table.get(source_id).map_err(|e| self.error("read failed", e))?;
        Ok(stored.map_or(0, |g| g.value()))
    }

    fn reset_source(&self, source_id: &str, keys: &[CheckpointKey]) -> Result<(usize, u32), StoreError> {
        let txn = self.db.begin_write().map_err(|e| self.error("cannot begin a transaction", e))?;
        let mut removed = 0;
        let next;
        {
            let mut checkpoints = txn.open_table(CHECKPOINTS).map_err(|e| self.error("cannot open the table", e))?;
            for key in keys {
                if checkpoints.remove(key.to_string().as_str()).map_err(|e| self.error("delete failed", e))?.is_some() {
                    removed += 1;
                }
            }
            let mut generations =
                txn.open_table(GENERATIONS).map_err(|e| self.error("cannot open the generations", e))?;
            let current =
                generations.get(source_id).map_err(|e| self.error("read failed", e))?.map_or(0, |g| g.value());
            next = current.checked_add(1).ok_or_else(|| {
                self.error(
                    &format!("source {source_id:?} is at the last log generation"),
                    "4294967295 resets; give the source a new id",
                )
            })?;
            generations.insert(source_id, next).map_err(|e| self.error("write failed", e))?;
        }
        txn.commit().map_err(|e| self.error("commit failed", e))?;
        Ok((removed, next))
    }
}

impl DeadLetterQueue for EmbeddedStore {
    fn put(&self, letter: &DeadLetter, max_entries: usize, drop_oldest: bool) -> Result<(), StoreError> {
        let value = serde_json::to_string(letter).map_err(|e| self.error("cannot encode a dead letter", e))?;
        let txn = self.db.begin_write().map_err(|e| self.error("cannot begin a transaction", e))?;
        {
            let mut table = txn.open_table(DEAD_LETTERS).map_err(|e| self.error("cannot open the dead letters", e))?;
            let count = table.len().map_err(|e| self.error("read failed", e))? as usize;
            if count >= max_entries {
                if !drop_oldest {
                    return Err(StoreError::DeadLetterQueueFull { max: max_entries });
                }
                let mut oldest: Option<(i64, String)> = None;
                for entry in table.iter().map_err(|e| self.error("read failed", e))? {
                    let (key, value) = entry.map_err(|e| self.error("read failed", e))?;
                    let at = serde_json::from_str::<DeadLetter>(value.value()).map_or(i64::MIN, |l| l.recorded_at_us);
                    if oldest.as_ref().is_none_or(|(o, _)| at < *o) {
                        oldest = Some((at, key.value().to_string()));
                    }
                }
                if let Some((_, key)) = oldest {
                    table.remove(key.as_str()).map_err(|e| self.error("delete failed", e))?;
                }
            }
            table.insert(letter.key.as_str(), value.as_str()).map_err(|e| self.error("write failed", e))?;
        }
        txn.commit().map_err(|e| self.error("commit failed", e))
    }

    fn letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.error("cannot begin a read", e))?;
        let table = match txn.open_table(DEAD_LETTERS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.error("cannot open the dead letters", e)),
        };
        let mut letters = Vec::new();
        for entry in table.iter().map_err(|e| self.error("read failed", e))? {
            let (key, value) = entry.map_err(|e| self.error("read failed", e))?;
            let letter: DeadLetter = serde_json::from_str(value.value()).map_err(|_| StoreError::Corrupt {
                key: key.value().to_string(),
                text: value.value().chars().take(200).collect(),
            })?;
            letters.push(letter);
        }
        letters.sort_by_key(|l| l.recorded_at_us);
        Ok(letters)
    }

    fn purge(&self, keys: &[String]) -> Result<usize, StoreError> {
        let txn = self.db.begin_write().map_err(|e| self.error("cannot begin a transaction", e))?;
        let mut removed = 0;
        {
            let mut table = txn.open_table(DEAD_LETTERS).map_err(|e| self.error("cannot open the dead letters", e))?;
            for key in keys {
                if table.remove(key.as_str()).map_err(|e| self.error("delete failed", e))?.is_some() {
                    removed += 1;
                }
            }
        }
        txn.commit().map_err(|e| self.error("commit failed", e))?;
        Ok(removed)
    }
}
