//! The PostgreSQL store's one connection, on a thread of its own: store
//! calls block, and are made from async code, where a runtime of their
//! own could not be entered.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use sluice_core::StoreError;
use sluice_pgwire::{ConnectParams, Connection, PgError, Rows};
use tracing::{info, warn};

/// One query's limit: a store that stops answering mid-call is treated as
/// a cut connection, and the call is tried again on a new one.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// The first of the advisory lock's two keys: "SLUC".
pub(super) const LOCK_CLASS: i32 = 0x534C_5543;

pub(super) struct Settings {
    pub params: ConnectParams,
    pub schema: String,
    /// How long a call waits out a store it cannot reach.
    pub outage: Duration,
    /// Hold the store's session lock: one `sluice run` (or offline command)
    /// at a time, as the embedded store's file lock allows.
    pub hold: bool,
    /// This instance's id in a fleet, whose lock its session holds.
    pub instance: Option<String>,
    /// The store, for messages: server, database and schema.
    pub describe: String,
}

/// Why a call did not complete.
pub(super) enum CallError {
    /// The connection failed or the server is restarting: worth waiting.
    Transient(String),
    Fatal(StoreError),
}

impl From<PgError> for CallError {
    fn from(e: PgError) -> Self {
        if e.is_transient() {
            CallError::Transient(e.to_string())
        } else {
            CallError::Fatal(StoreError::Io { path: String::new(), detail: e.to_string(), cause: Some(e.into()) })
        }
    }
}

pub(super) struct Session {
    runtime: tokio::runtime::Runtime,
    conn: Option<Connection>,
    pub settings: Settings,
}

pub(super) type Job = Box<dyn FnOnce(&mut Session) + Send>;

impl Session {
    /// Starts the store's thread; jobs sent to it run in order.
    pub fn spawn(settings: Settings) -> Result<mpsc::Sender<Job>, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
            StoreError::Io { path: settings.describe.clone(), detail: format!("cannot start: {e}"), cause: None }
        })?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let mut session = Session { runtime, conn: None, settings };
        std::thread::Builder::new()
            .name("sluice-store".into())
            .spawn(move || {
                for job in queue {
                    job(&mut session);
                }
                if let Some(conn) = session.conn.take() {
                    session.runtime.block_on(conn.close());
                }
            })
            .map_err(|e| StoreError::Io {
                path: String::new(),
                detail: format!("cannot start a thread: {e}"),
                cause: None,
            })?;
        Ok(jobs)
    }

    /// Runs `sql` (one or more statements) on the connection, opening one
    /// first if there is none.
    pub fn query(&mut self, sql: &str) -> Result<Rows, CallError> {
        if self.conn.is_none() {
            self.connect()?;
        }
        let Some(conn) = self.conn.as_mut() else { return Err(CallError::Transient("not connected".into())) };
        match self.runtime.block_on(async { tokio::time::timeout(QUERY_TIMEOUT, conn.simple_query(sql)).await }) {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                if matches!(e, PgError::Server(..)) && !e.is_transient() {
                    // The session stays; a transaction the error broke ends here.
                    let rollback = async { tokio::time::timeout(QUERY_TIMEOUT, conn.simple_query("ROLLBACK")).await };
                    let _ = self.runtime.block_on(rollback);
                } else {
                    self.conn = None;
                }
                Err(e.into())
            }
            Err(_) => {
                self.conn = None;
                Err(CallError::Transient(format!("no answer within {}s", QUERY_TIMEOUT.as_secs())))
            }
        }
    }

    /// Leaves a transaction the caller gave up on.
    pub fn rollback(&mut self) {
        if self.conn.is_some() {
            let _ = self.query("ROLLBACK");
        }
    }

    fn connect(&mut self) -> Result<(), CallError> {
        let conn = self.runtime.block_on(Connection::connect(&self.settings.params, false))?;
        self.conn = Some(conn);
        // Every store write is durable when it returns, whatever the
        // server's default; literals are plain SQL strings.
        self.query("SET synchronous_commit = on; SET standard_conforming_strings = on")?;
        // A lone `sluice run` holds the store's lock alone; the members of
        // a fleet share it. So neither starts while the other kind runs.
        if self.settings.hold || self.settings.instance.is_some() {
            let take =
                if self.settings.instance.is_some() { "pg_try_advisory_lock_shared" } else { "pg_try_advisory_lock" };
            let sql = format!(
                "SELECT {take}({LOCK_CLASS}, hashtext({})) AS held",
                super::sql::literal(&self.settings.schema)?
            );
            if self.query(&sql)?.first("held") != Some("t") {
                self.conn = None;
                return Err(CallError::Fatal(StoreError::InUse { path: self.settings.describe.clone() }));
            }
        }
        if let Some(instance) = self.settings.instance.clone() {
            let sql = format!(
                "SELECT pg_try_advisory_lock({}, hashtext({})) AS held",
                super::lease::INSTANCE_LOCK,
                super::sql::literal(&instance)?
            );
            if self.query(&sql)?.first("held") != Some("t") {
                self.conn = None;
                return Err(CallError::Fatal(StoreError::Io {
                    path: self.settings.describe.clone(),
                    detail: format!("instance id {instance:?} is in use by another live instance; give each its own"),
                    cause: None,
                }));
            }
        }
        Ok(())
    }

    /// Runs `body` until it completes, waiting out a store that cannot be
    /// reached for up to the outage limit. `body` must be safe to run
    /// again after a cut connection: each is one transaction, or reads.
    pub fn retrying<T>(
        &mut self,
        what: &str,
        mut body: impl FnMut(&mut Session) -> Result<T, CallError>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let mut wait = Duration::from_millis(200);
        let mut warned = false;
        loop {
            match body(self) {
                Ok(value) => {
                    if warned {
                        info!(store = %self.settings.describe, "the checkpoint store answers again");
                    }
                    return Ok(value);
                }
                Err(CallError::Fatal(StoreError::Io { detail, cause, .. })) => {
                    return Err(StoreError::Io {
                        path: self.settings.describe.clone(),
                        detail: format!("{what}: {detail}"),
                        cause,
                    });
                }
                Err(CallError::Fatal(other)) => return Err(other),
                Err(CallError::Transient(detail)) => {
                    if started.elapsed() + wait > self.settings.outage {
                        return Err(StoreError::Io {
                            path: self.settings.describe.clone(),
                            detail: format!(
                                "{what}: {detail}; the store could not be reached for {}s (store.config.outage_secs)",
                                self.settings.outage.as_secs()
                            ),
                            cause: None,
                        });
                    }
                    if !warned {
                        warn!(store = %self.settings.describe, error = %detail, "the checkpoint store cannot be reached; waiting for it");
                        warned = true;
                    }
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}
