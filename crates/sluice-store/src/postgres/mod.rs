//! The PostgreSQL store: checkpoints, generations, dead letters and named
//! state as tables of one schema, so no state stays on an instance's disk
//! and another instance can take a pipeline over.
//!
//! Each call is one transaction, committed with `synchronous_commit = on`
//! before it returns. A cut connection or a restarting server is waited
//! out (up to `outage_secs`) and the call is run again on a new
//! connection: the checkpoint commit is safe to repeat (a position equal
//! to the stored one is no regression), as are the others, except that an
//! appended line whose commit was cut off may be stored twice.

mod lease;
pub mod preflight;
mod session;
mod sql;

use std::sync::mpsc;
use std::time::Duration;

use sluice_core::{
    CheckpointKey, CheckpointStore, DeadLetter, DeadLetterQueue, Position, StateDir, StateStore, StoreError,
};
use sluice_pgwire::ConnectParams;

pub use lease::{FencedStore, Lease, LeaseRow, Taken};
use session::{CallError, Job, Session, Settings};
use sql::{array, bytes, literal, quote_ident};

/// How to reach the store.
pub struct PgStoreOptions {
    pub params: ConnectParams,
    pub schema: String,
    pub outage: Duration,
    /// Hold the store's lock, as `sluice run` does: a second process
    /// opening it with `hold`, or as a member of a fleet, is refused with
    /// [`StoreError::InUse`].
    pub hold: bool,
    /// This instance's id in a fleet: its session holds the instance lock
    /// that keeps its leases alive (see `lease.rs`).
    pub instance: Option<String>,
}

#[derive(Clone)]
pub struct PgStore {
    jobs: mpsc::Sender<Job>,
    describe: String,
    schema: String,
}

impl PgStore {
    /// Connects, creates the tables if needed and checks their layout. A
    /// store that cannot be reached fails at once, naming the server.
    pub fn open(options: PgStoreOptions) -> Result<Self, StoreError> {
        let describe = format!(
            "postgres://{}:{}/{} schema {}",
            options.params.host, options.params.port, options.params.database, options.schema
        );
        let schema = options.schema.clone();
        let settings = Settings {
            params: options.params,
            schema: options.schema,
            outage: options.outage,
            hold: options.hold,
            instance: options.instance,
            describe: describe.clone(),
        };
        let store = PgStore { jobs: Session::spawn(settings)?, describe, schema };
        let (reply, answer) = mpsc::channel();
        let job: Job = Box::new(move |session| {
            let _ = reply.send(sql::prepare(session));
        });
        store.jobs.send(job).map_err(|_| store.stopped())?;
        match answer.recv().map_err(|_| store.stopped())? {
            Ok(()) => Ok(store),
            Err(CallError::Transient(detail)) => Err(StoreError::Io {
                path: store.describe.clone(),
                detail: format!(
                    "cannot reach the store: {detail}; hint: check store.config host, port and ssl_mode, and that the server runs"
                ),
                cause: None,
            }),
            Err(CallError::Fatal(StoreError::Io { detail, cause, .. })) => {
                Err(StoreError::Io { path: store.describe.clone(), detail, cause })
            }
            Err(CallError::Fatal(other)) => Err(other),
        }
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    fn stopped(&self) -> StoreError {
        StoreError::Interrupted { detail: format!("the thread of the store {} has stopped", self.describe) }
    }

    fn call<T: Send + 'static>(
        &self,
        what: &'static str,
        body: impl FnMut(&mut Session) -> Result<T, CallError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (reply, answer) = mpsc::channel();
        let job: Job = Box::new(move |session| {
            let _ = reply.send(session.retrying(what, body));
        });
        self.jobs.send(job).map_err(|_| self.stopped())?;
        answer.recv().map_err(|_| self.stopped())?
    }

    fn table(&self, name: &str) -> String {
        format!("{}.{name}", quote_ident(&self.schema))
    }

    /// Stores `updates` in one transaction; with a lease, only while the
    /// lease is still at its epoch (see `lease.rs`).
    fn commit_as(&self, updates: &[(CheckpointKey, Position)], lease: Option<Lease>) -> Result<(), StoreError> {
        let updates: Vec<(String, Position)> = updates.iter().map(|(k, p)| (k.to_string(), p.clone())).collect();
        let (table, leases) = (self.table("checkpoints"), self.table("leases"));
        self.call("commit checkpoints", move |s| {
            s.query("BEGIN")?;
            if let Some(lease) = &lease {
                lease::check_epoch(s, &leases, lease)?;
            }
            let keys = array(updates.iter().map(|(k, _)| k.clone()))?;
            let stored = positions(&s.query(&format!("SELECT key, position FROM {table} WHERE key = ANY({keys}) FOR UPDATE"))?)?;
            for (key, position) in &updates {
                if let Some((_, held)) = stored.iter().find(|(k, p)| k == key && p > position) {
                    s.rollback();
                    return Err(CallError::Fatal(StoreError::Regression {
                        key: key.clone(),
                        stored: held.to_string(),
                        proposed: position.to_string(),
                    }));
                }
            }
            let values: Vec<String> = updates
                .iter()
                .map(|(k, p)| Ok(format!("({}, {})", literal(k)?, literal(&p.to_string())?)))
                .collect::<Result<_, CallError>>()?;
            s.query(&format!(
                "INSERT INTO {table} (key, position) VALUES {} ON CONFLICT (key) DO UPDATE SET position = EXCLUDED.position, updated_at = now(); COMMIT",
                values.join(", ")
            ))?;
            Ok(())
        })
    }
}

fn corrupt(key: &str, text: &str) -> CallError {
    CallError::Fatal(StoreError::Corrupt { key: key.to_string(), text: text.to_string() })
}

/// `key → position` of the rows.
fn positions(rows: &sluice_pgwire::Rows) -> Result<Vec<(String, Position)>, CallError> {
    let mut all = Vec::new();
    for row in &rows.rows {
        let key = rows.get(row, "key").unwrap_or_default().to_string();
        let text = rows.get(row, "position").unwrap_or_default();
        let position = text.parse().map_err(|_| corrupt(&key, text))?;
        all.push((key, position));
    }
    Ok(all)
}

impl CheckpointStore for PgStore {
    fn load(&self, keys: &[CheckpointKey]) -> Result<Vec<Option<Position>>, StoreError> {
        let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
        let table = self.table("checkpoints");
        self.call("load checkpoints", move |s| {
            let sql = format!("SELECT key, position FROM {table} WHERE key = ANY({})", array(names.clone())?);
            let stored = positions(&s.query(&sql)?)?;
            Ok(names.iter().map(|n| stored.iter().find(|(k, _)| k == n).map(|(_, p)| p.clone())).collect())
        })
    }

    fn list(&self) -> Result<Vec<(String, Position)>, StoreError> {
        let table = self.table("checkpoints");
        self.call("list checkpoints", move |s| {
            let mut all = positions(&s.query(&format!("SELECT key, position FROM {table}"))?)?;
            // By key text as Rust sorts it, whatever the database's collation.
            all.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(all)
        })
    }

    fn commit(&self, updates: &[(CheckpointKey, Position)]) -> Result<(), StoreError> {
        self.commit_as(updates, None)
    }

    fn remove(&self, keys: &[CheckpointKey]) -> Result<usize, StoreError> {
        let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
        let table = self.table("checkpoints");
        self.call("remove checkpoints", move |s| {
            let sql = format!("DELETE FROM {table} WHERE key = ANY({}) RETURNING key", array(names.clone())?);
            Ok(s.query(&sql)?.rows.len())
        })
    }

    fn generation(&self, source_id: &str) -> Result<u32, StoreError> {
        let source = source_id.to_string();
        let table = self.table("generations");
        self.call("read the generation", move |s| {
            let rows = s.query(&format!("SELECT generation FROM {table} WHERE source = {}", literal(&source)?))?;
            let Some(text) = rows.first("generation") else { return Ok(0) };
            text.parse().map_err(|_| corrupt(&format!("generation of {source}"), text))
        })
    }

    fn reset_source(&self, source_id: &str, keys: &[CheckpointKey]) -> Result<(usize, u32), StoreError> {
        let source = source_id.to_string();
        let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
        let (checkpoints, generations) = (self.table("checkpoints"), self.table("generations"));
        self.call("reset the source", move |s| {
            let removed = s
                .query(&format!("BEGIN; DELETE FROM {checkpoints} WHERE key = ANY({}) RETURNING key", array(names.clone())?))?
                .rows
                .len();
            let rows = s.query(&format!(
                "INSERT INTO {generations} VALUES ({0}, 1) ON CONFLICT (source) DO UPDATE SET generation = {generations}.generation + 1 RETURNING generation",
                literal(&source)?
            ))?;
            let text = rows.first("generation").unwrap_or_default().to_string();
            let Ok(next) = text.parse::<u32>() else {
                s.rollback();
                return Err(CallError::Fatal(StoreError::Io {
                    path: String::new(),
                    detail: format!("source {source:?} is at the last log generation ({text}); give the source a new id"),
                    cause: None,
                }));
            };
            s.query("COMMIT")?;
            Ok((removed, next))
        })
    }
}

impl DeadLetterQueue for PgStore {
    fn put(&self, letter: &DeadLetter, max_entries: usize, drop_oldest: bool) -> Result<(), StoreError> {
        let value = serde_json::to_string(letter).map_err(|e| StoreError::Io {
            path: self.describe.clone(),
            detail: format!("cannot encode a dead letter: {e}"),
            cause: None,
        })?;
        let (key, at) = (letter.key.clone(), letter.recorded_at_us);
        let table = self.table("dead_letters");
        self.call("store a dead letter", move |s| {
            let rows = s.query(&format!("BEGIN; LOCK TABLE {table} IN EXCLUSIVE MODE; SELECT count(*) AS n FROM {table}"))?;
            let count: usize = rows.first("n").and_then(|n| n.parse().ok()).unwrap_or(0);
            let mut sql = String::new();
            if count >= max_entries {
                if !drop_oldest {
                    s.rollback();
                    return Err(CallError::Fatal(StoreError::DeadLetterQueueFull { max: max_entries }));
                }
                sql = format!(
                    "DELETE FROM {table} WHERE key = (SELECT key FROM {table} ORDER BY recorded_at_us, key LIMIT 1); "
                );
            }
            sql.push_str(&format!(
                "INSERT INTO {table} VALUES ({}, {at}, {}) ON CONFLICT (key) DO UPDATE SET recorded_at_us = EXCLUDED.recorded_at_us, letter = EXCLUDED.letter; COMMIT",
                literal(&key)?,
                literal(&value)?
            ));
            s.query(&sql)?;
            Ok(())
        })
    }

    fn letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        let table = self.table("dead_letters");
        self.call("read the dead letters", move |s| {
            let rows = s.query(&format!("SELECT key, letter FROM {table} ORDER BY recorded_at_us, key"))?;
            rows.rows
                .iter()
                .map(|row| {
                    let text = rows.get(row, "letter").unwrap_or_default();
                    serde_json::from_str(text).map_err(|_| {
                        corrupt(rows.get(row, "key").unwrap_or_default(), &text.chars().take(200).collect::<String>())
                    })
                })
                .collect()
        })
    }

    fn purge(&self, keys: &[String]) -> Result<usize, StoreError> {
        let keys = keys.to_vec();
        let table = self.table("dead_letters");
        self.call("purge dead letters", move |s| {
            Ok(s.query(&format!("DELETE FROM {table} WHERE key = ANY({}) RETURNING key", array(keys.clone())?))?
                .rows
                .len())
        })
    }
}

impl StateStore for PgStore {
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let (name, table) = (name.to_string(), self.table("state"));
        self.call("read state", move |s| {
            let rows =
                s.query(&format!("SELECT encode(value, 'hex') AS v FROM {table} WHERE name = {}", literal(&name)?))?;
            let Some(text) = rows.first("v") else { return Ok(None) };
            hex::decode(text).map(Some).map_err(|_| corrupt(&name, "(not hex)"))
        })
    }

    fn write(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        let (name, value, table) = (name.to_string(), value.to_vec(), self.table("state"));
        self.call("write state", move |s| {
            s.query(&format!(
                "INSERT INTO {table} (name, value) VALUES ({}, {}) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value, updated_at = now()",
                literal(&name)?,
                bytes(&value)
            ))?;
            Ok(())
        })
    }

    fn append_line(&self, name: &str, line: &[u8]) -> Result<(), StoreError> {
        let mut value = line.to_vec();
        value.push(b'\n');
        let (name, table) = (name.to_string(), self.table("state"));
        self.call("append state", move |s| {
            s.query(&format!(
                "INSERT INTO {table} (name, value) VALUES ({0}, {1}) ON CONFLICT (name) DO UPDATE SET value = {table}.value || EXCLUDED.value, updated_at = now()",
                literal(&name)?,
                bytes(&value)
            ))?;
            Ok(())
        })
    }

    fn remove(&self, name: &str) -> Result<bool, StoreError> {
        let (name, table) = (name.to_string(), self.table("state"));
        self.call("remove state", move |s| {
            Ok(!s
                .query(&format!("DELETE FROM {table} WHERE name = {} RETURNING name", literal(&name)?))?
                .rows
                .is_empty())
        })
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let table = self.table("state");
        self.call("list state", move |s| {
            let rows = s.query(&format!("SELECT name FROM {table} WHERE starts_with(name, {})", literal(&prefix)?))?;
            let mut names: Vec<String> = rows
                .rows
                .iter()
                .filter_map(|row| row.first().cloned().flatten())
                .filter_map(|name| name.strip_prefix(&prefix).map(str::to_string))
                .filter(|rest| !rest.contains('/'))
                .collect();
            names.sort();
            Ok(names)
        })
    }

    fn locate(&self, name: &str) -> String {
        format!("{name} in {}", self.describe)
    }
}

impl crate::Store for PgStore {
    fn state(&self) -> StateDir {
        StateDir::new(std::sync::Arc::new(self.clone()), "")
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

#[cfg(test)]
mod tests;
