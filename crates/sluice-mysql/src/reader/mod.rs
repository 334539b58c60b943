//! The binlog reader task: it reads the binlog stream, groups row events
//! into transactions, decodes rows with the schema in force when they were
//! written (see [`crate::schema`]), and measures how far behind the
//! server's head it is.

mod decimal;
mod images;
mod rows;

use std::sync::Arc;
use std::time::Duration;

use mysql_async::binlog::BinlogChecksumAlg;
use mysql_async::binlog::events::{Event as BinlogEvent, GtidEvent, QueryEvent, RotateEvent, TransactionPayloadEvent};
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn};
use sluice_config::{DdlLiterals, MysqlConfig, glob_match};
use sluice_core::source::ReaderHandle;
use sluice_core::{BinlogPos, Event, LogStats, Position, SourceError};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::conn::connect;
use crate::ddl::Dialect;
use crate::errors::mysql_error;
use crate::gtid::{MariaGtid, MariaState};
use crate::schema::SchemaHistory;
use crate::source::MyStream;

/// Decoded events gathered before the reader waits for the coordinator.
const READY_LIMIT: usize = 1024;
/// How often the reader measures how far behind the server's head it is:
/// often enough that a stall shows within the runtime's stall window (5 s).
const LOG_MEASURE_INTERVAL: Duration = Duration::from_secs(2);

/// The transaction being read.
pub(crate) struct Transaction {
    offset: u64,
    gtid: Option<MariaGtid>,
    gtid_before: Option<Arc<str>>,
    tx_id: Arc<str>,
    time_us: i64,
    seq: u32,
    /// A MariaDB GTID with the standalone flag: a DDL with no BEGIN/COMMIT.
    standalone: bool,
    /// Where the current statement's rows start in the binlog: its rows
    /// event, or a DDL's query event. Debezium's `source.pos`.
    statement_start: u64,
}

pub(crate) struct Reader {
    pub(crate) stream: BinlogStream,
    pub(crate) schema_conn: Conn,
    pub(crate) history: SchemaHistory,
    pub(crate) source_id: Arc<str>,
    pub(crate) patterns: Vec<String>,
    pub(crate) ddl_literals: DdlLiterals,
    /// The source's config when it has a signal table, for snapshot requests.
    pub(crate) signals: Option<MysqlConfig>,
    pub(crate) events: mpsc::Sender<Result<Vec<Event>, SourceError>>,
    pub(crate) receive_timeout: Duration,
    pub(crate) file: Option<Arc<str>>,
    pub(crate) maria_state: MariaState,
    pub(crate) tx: Option<Transaction>,
    pub(crate) held: Option<Event>,
    /// Places each event in its transaction for Debezium's metadata.
    counter: sluice_core::TxCounter,
    /// The server adds CRC32 checksums to events.
    pub(crate) checksum: bool,
    /// A format description event arrived, so the reader knows the checksum.
    pub(crate) format_seen: bool,
    pub(crate) log: Arc<LogStats>,
    /// The end of the last event read in `file`.
    pub(crate) read_through: u64,
    /// The server is MariaDB (its Debezium connector is `mariadb`).
    pub(crate) mariadb: bool,
    /// What each recorded schema's rows share, by the schema's address.
    pub(crate) parts: std::collections::HashMap<usize, Arc<rows::TableParts>>,
}

pub(crate) fn unreadable(what: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::permanent(format!("cannot read a binlog {what}: {e}"), "report this with the server version")
}

impl Reader {
    pub(crate) async fn run(mut self) {
        if let Err(err) = self.stream_events().await {
            let _ = self.events.send(Err(err)).await;
        }
    }

    async fn stream_events(&mut self) -> Result<(), SourceError> {
        use futures_util::StreamExt as _;
        let mut ready: Vec<Event> = Vec::new();
        let events = self.events.clone();
        let mut measure = tokio::time::interval(LOG_MEASURE_INTERVAL);
        measure.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = measure.tick() => self.measure_log().await,
                permit = events.reserve(), if !ready.is_empty() => {
                    let Ok(permit) = permit else { return Ok(()) };
                    // Room for a full chunk, or one like this if larger, so the next
                    // does not move its events each time it grows; a kept vector's
                    // pages are resident.
                    let room = ready.len().max(READY_LIMIT);
                    permit.send(Ok(std::mem::replace(&mut ready, sluice_core::event_vecs::take(room))));
                }
                next = tokio::time::timeout(self.receive_timeout, self.stream.next()), if ready.len() < READY_LIMIT => {
                    let event = match next {
                        Err(_) => return Err(SourceError::transient(format!(
                            "no binlog event or heartbeat from the server for {}s; reconnecting", self.receive_timeout.as_secs()
                        ))),
                        Ok(None) => return Err(SourceError::transient("the server ended the binlog stream")),
                        Ok(Some(Err(e))) => return Err(mysql_error("binlog stream", e)),
                        Ok(Some(Ok(event))) => event,
                    };
                    self.handle(event, &mut ready).await?;
                }
            }
        }
    }

    /// Reads the server's binlog files to say where its head is and how
    /// many bytes the reader is behind it. A failure only leaves the
    /// figures stale: it must never stop streaming.
    async fn measure_log(&mut self) {
        let logs: Vec<mysql_async::Row> = match self.schema_conn.query("SHOW BINARY LOGS").await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the binlog files");
                return;
            }
        };
        let files: Vec<(String, u64)> =
            logs.iter().filter_map(|row| Some((row.get::<String, _>(0)?, row.get::<u64, _>(1)?))).collect();
        let Some((last, last_size)) = files.last() else { return };
        let current = self.file.as_deref().unwrap_or(last.as_str());
        let behind: u64 = files
            .iter()
            .filter(|(name, _)| sluice_core::binlog_file_index(name) >= sluice_core::binlog_file_index(current))
            .map(|(name, size)| if name == current { size.saturating_sub(self.read_through) } else { *size })
            .sum();
        self.log.set_head(format!("{last}:{last_size}"), behind);
    }

    async fn handle(&mut self, event: BinlogEvent, out: &mut Vec<Event>) -> Result<(), SourceError> {
        let header = event.header();
        self.read_through = u64::from(header.log_pos()).max(self.read_through);
        let kind = header.event_type_raw();
        self.verify_checksum(&event)?;
        let offset = u64::from(header.log_pos()).saturating_sub(u64::from(header.event_size()));
        let time_us = i64::from(header.timestamp()) * 1_000_000;
        match kind {
            0x04 => {
                let rotate: RotateEvent<'_> = event.read_event().map_err(|e| unreadable("rotate event", e))?;
                let raw = rotate.name_raw();
                // The rotate the server sends first comes before the format
                // description, so the reader cannot know to strip a
                // checksum: MariaDB's carries one, MySQL's does not.
                let raw = match (self.format_seen, raw.len().checked_sub(4)) {
                    (false, Some(len)) if self.checksum && ends_in_checksum(&event) => &raw[..len],
                    _ => raw,
                };
                let name = std::str::from_utf8(raw)
                    .ok()
                    .filter(|n| !n.is_empty() && !n.contains(':'))
                    .ok_or_else(|| unreadable("rotate event", "no readable binlog file name"))?;
                self.file = Some(name.into());
                self.read_through = rotate.position();
            }
            162 => {
                let gtid = maria_gtid(event.data(), header.server_id())
                    .ok_or_else(|| unreadable("GTID event", "too short"))?;
                let standalone = event.data().get(12).is_some_and(|flags| flags & 1 == 1);
                self.begin(offset, Some(gtid), gtid.to_string().into(), time_us, standalone);
            }
            0x21 => {
                let gtid: GtidEvent = event.read_event().map_err(|e| unreadable("GTID event", e))?;
                let tx_id = format!("{}:{}", uuid_text(&gtid.sid()), gtid.gno());
                self.begin(offset, None, tx_id.into(), time_us, false);
            }
            0x22 => self.begin(offset, None, self.offset_id(offset), time_us, false),
            0x02 => {
                let query: QueryEvent<'_> = event.read_event().map_err(|e| unreadable("query event", e))?;
                let sql = query.query().trim().to_string();
                let database = query.schema().to_string();
                let dialect = statement_dialect(&query);
                match sql.to_ascii_uppercase().as_str() {
                    "BEGIN" => {
                        if self.tx.is_none() {
                            self.begin(offset, None, self.offset_id(offset), time_us, false);
                        }
                    }
                    "COMMIT" => self.commit(out),
                    _ => {
                        if self.tx.is_none() {
                            self.begin(offset, None, self.offset_id(offset), time_us, true);
                        }
                        if let Some(tx) = self.tx.as_mut() {
                            tx.statement_start = offset;
                        }
                        self.ddl(&database, &sql, dialect, header.server_id(), out).await?;
                        if self.tx.as_ref().is_some_and(|t| t.standalone) {
                            self.commit(out);
                        }
                    }
                }
            }
            0x0f => self.format_seen = true,
            0x10 => self.commit(out),
            0x17..=0x19 | 0x1e..=0x20 => {
                if let Some(tx) = self.tx.as_mut() {
                    tx.statement_start = offset;
                }
                self.rows(&event, out).await?
            }
            0x27 => {
                return Err(SourceError::permanent(
                    "the binlog holds a partial JSON update, which has no full after image",
                    "SET GLOBAL binlog_row_value_options = '' on the server",
                ));
            }
            0x28 => {
                // MySQL compressed transactions: the stream decompresses them
                // and yields the events inside; one it cannot read is an error.
                event
                    .read_event::<TransactionPayloadEvent<'_>>()
                    .map_err(|e| unreadable("compressed transaction (binlog_transaction_compression)", e))?;
            }
            164 => {
                return Err(SourceError::permanent(
                    "the binlog is encrypted",
                    "Sluice cannot read encrypted binlogs; turn encrypt_binlog off",
                ));
            }
            165..=171 => {
                return Err(SourceError::permanent(
                    "the binlog holds MariaDB compressed events, which Sluice does not decode",
                    "SET GLOBAL log_bin_compress = OFF on the server (new binlog events are then readable)",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// The stream parser keeps each event's CRC32 but does not check it.
    fn verify_checksum(&self, event: &BinlogEvent) -> Result<(), SourceError> {
        let Some(stored) = event.checksum() else { return Ok(()) };
        let computed = event.calc_checksum(BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32);
        if computed == u32::from_le_bytes(stored) {
            return Ok(());
        }
        Err(SourceError::permanent(
            format!(
                "binlog event checksum mismatch in {} at offset {} (stored {:08x}, computed {computed:08x})",
                self.file.as_deref().unwrap_or("?"),
                event.header().log_pos(),
                u32::from_le_bytes(stored)
            ),
            "the binlog or the network corrupted data; check the server's binlog with mariadb-binlog --verify-binlog-checksum",
        ))
    }

    fn offset_id(&self, offset: u64) -> Arc<str> {
        format!("{}:{offset}", self.file.as_deref().unwrap_or("?")).into()
    }

    fn begin(&mut self, offset: u64, gtid: Option<MariaGtid>, tx_id: Arc<str>, time_us: i64, standalone: bool) {
        let gtid_before =
            (!self.maria_state.is_empty() || gtid.is_some()).then(|| Arc::from(self.maria_state.to_string()));
        self.tx =
            Some(Transaction { offset, gtid, gtid_before, tx_id, time_us, seq: 0, standalone, statement_start: 0 });
    }

    fn commit(&mut self, out: &mut Vec<Event>) {
        if let Some(mut last) = self.held.take() {
            last.tx_end = true;
            self.counter.stamp(&mut last);
            out.push(last);
        }
        if let Some(tx) = self.tx.take()
            && let Some(gtid) = tx.gtid
        {
            self.maria_state.apply(gtid);
        }
    }

    fn position(&mut self) -> Result<(Position, Arc<str>, i64), SourceError> {
        let file = self.file.clone().ok_or_else(|| unreadable("event", "a row before any rotate event"))?;
        let tx = self.tx.as_mut().ok_or_else(|| unreadable("event", "a row outside a transaction"))?;
        let position =
            Position::Mysql(BinlogPos { file, offset: tx.offset, seq: tx.seq, gtid_before: tx.gtid_before.clone() });
        tx.seq = tx.seq.saturating_add(1);
        Ok((position, tx.tx_id.clone(), tx.time_us))
    }

    fn emit(&mut self, event: Event, out: &mut Vec<Event>) {
        if let Some(mut previous) = self.held.replace(event) {
            self.counter.stamp(&mut previous);
            out.push(previous);
        }
    }

    fn matches(&self, table: &str) -> bool {
        self.patterns.iter().any(|p| glob_match(p, table))
    }

    /// Asks for an incremental snapshot of `table`, renamed into the
    /// captured tables with rows of its own, through the signal table
    /// (as `sluice snapshot --table` does). Without a signal table, or if
    /// the table cannot be read by key, the operator is told instead: the
    /// stream goes on either way.
    async fn read_arrival(&mut self, table: &str) {
        let Some(config) = &self.signals else {
            warn!(
                table,
                "a table renamed into the captured tables brings rows the binlog never showed; set signal_table and run `sluice snapshot --table` to read them"
            );
            return;
        };
        match crate::incremental::request(config, table).await {
            Ok(_) => info!(table, "a table renamed into the captured tables: an incremental snapshot reads its rows"),
            Err(e) => {
                warn!(table, error = %e, "a table renamed into the captured tables cannot be read by an incremental snapshot")
            }
        }
    }
}

/// Where the binlog stream starts.
pub(crate) enum Start {
    File { file: String, offset: u64 },
    Gtid(String),
}

/// Chunks queued between the reader task and `poll`.
const CHUNK_QUEUE: usize = 8;

impl MyStream {
    /// Asks the server for the binlog from `start` and spawns the reader.
    pub(crate) async fn spawn_reader(
        &self,
        mut conn: Conn,
        mariadb: bool,
        start: Start,
    ) -> Result<ReaderHandle, SourceError> {
        let q = |e| mysql_error("binlog request", e);
        let mut maria_state = MariaState::default();
        let checksum: Option<String> = conn.query_first("SELECT @@binlog_checksum").await.map_err(q)?;
        let checksum = checksum.is_some_and(|c| !c.eq_ignore_ascii_case("NONE"));
        let (file, offset) = match &start {
            Start::File { file, offset } => {
                if mariadb {
                    let state: Option<Option<String>> =
                        conn.exec_first("SELECT BINLOG_GTID_POS(?, ?)", (file.as_str(), *offset)).await.map_err(q)?;
                    if let Some(Some(state)) = state {
                        maria_state = MariaState::parse(&state).unwrap_or_default();
                    }
                }
                (file.clone(), *offset)
            }
            Start::Gtid(state) => {
                maria_state = MariaState::parse(state).map_err(|e| {
                    SourceError::permanent(format!("GTID state: {e}"), "give a MariaDB GTID state like 0-1-100")
                })?;
                conn.query_drop(format!("SET @slave_connect_state = '{maria_state}'")).await.map_err(q)?;
                conn.query_drop("SET @slave_gtid_strict_mode = 0").await.map_err(q)?;
                conn.query_drop("SET @slave_gtid_ignore_duplicates = 0").await.map_err(q)?;
                (String::new(), 4)
            }
        };
        if mariadb {
            // Capability 4: send GTID events as they are (MARIA_SLAVE_CAPABILITY_GTID).
            conn.query_drop("SET @mariadb_slave_capability = 4").await.map_err(q)?;
        }
        conn.query_drop(format!("SET @master_heartbeat_period = {}", self.config.heartbeat_secs * 1_000_000_000))
            .await
            .map_err(q)?;
        let schema_conn = connect(&self.config).await?;
        let request =
            BinlogStreamRequest::new(self.config.replica_server_id()).with_filename(file.as_bytes()).with_pos(offset);
        let stream = conn.get_binlog_stream(request).await.map_err(q)?;
        let by = if matches!(start, Start::Gtid(_)) { "gtid" } else { "file" };
        info!(by, file, offset, gtid = %maria_state, server_id = self.config.replica_server_id(), "binlog streaming started");
        let history = SchemaHistory::open(self.state_dir.clone())?;
        let (tx, rx) = mpsc::channel(CHUNK_QUEUE);
        let reader = Reader {
            stream,
            schema_conn,
            history,
            source_id: self.config.id.as_str().into(),
            // The signal table's rows carry incremental snapshot requests
            // and watermarks; they are taken out before the sinks.
            patterns: self.config.tables.iter().chain(&self.config.signal_table).cloned().collect(),
            ddl_literals: self.config.ddl_literals,
            signals: self.config.signal_table.is_some().then(|| self.config.clone()),
            events: tx,
            receive_timeout: Duration::from_secs(self.config.heartbeat_secs * 3 + 5),
            file: (!file.is_empty()).then(|| Arc::from(file.as_str())),
            maria_state,
            tx: None,
            held: None,
            counter: Default::default(),
            mariadb,
            parts: std::collections::HashMap::new(),
            checksum,
            format_seen: false,
            log: self.log.clone(),
            read_through: offset,
        };
        Ok(ReaderHandle::new(rx, tokio::spawn(reader.run())))
    }
}

/// Whether the event's last 4 bytes are the CRC32 of its header and the
/// rest of its body.
fn ends_in_checksum(event: &BinlogEvent) -> bool {
    let (header, data) = (event.header(), event.data());
    let Some(body) = data.len().checked_sub(4) else { return false };
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&header.timestamp().to_le_bytes());
    hasher.update(&[header.event_type_raw()]);
    hasher.update(&header.server_id().to_le_bytes());
    hasher.update(&header.event_size().to_le_bytes());
    hasher.update(&header.log_pos().to_le_bytes());
    hasher.update(&header.flags_raw().to_le_bytes());
    hasher.update(&data[..body]);
    data[body..] == hasher.finalize().to_le_bytes()
}

/// MariaDB's GTID event body: sequence (8 bytes), domain (4), flags (1).
fn maria_gtid(data: &[u8], server: u32) -> Option<MariaGtid> {
    let seq = u64::from_le_bytes(data.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(data.get(8..12)?.try_into().ok()?);
    Some(MariaGtid { domain, server, seq })
}

fn uuid_text(sid: &[u8; 16]) -> String {
    let hex: String = sid.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// How the server split the statement into tokens: the two `sql_mode`
/// flags the query event logged with it. Without the status variable the
/// server's defaults hold.
fn statement_dialect(query: &QueryEvent<'_>) -> Dialect {
    use mysql_async::binlog::StatusVarKey;
    use mysql_async::binlog::events::StatusVarVal;
    use mysql_async::consts::SqlMode;
    let mode = query.status_vars().get_status_var(StatusVarKey::SqlMode).and_then(|var| match var.get_value() {
        Ok(StatusVarVal::SqlMode(flags)) => Some(flags.get()),
        _ => None,
    });
    match mode {
        Some(mode) => Dialect {
            ansi_quotes: mode.contains(SqlMode::MODE_ANSI_QUOTES),
            backslash_escapes: !mode.contains(SqlMode::MODE_NO_BACKSLASH_ESCAPES),
        },
        None => Dialect::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtid_bodies_and_uuids() {
        let mut body = 17u64.to_le_bytes().to_vec();
        body.extend(3u32.to_le_bytes());
        body.push(1);
        assert_eq!(maria_gtid(&body, 42), Some(MariaGtid { domain: 3, server: 42, seq: 17 }));
        assert_eq!(maria_gtid(&body[..5], 42), None);
        assert_eq!(uuid_text(&[0xab; 16]), "abababab-abab-abab-abab-abababababab");
    }
}
