//! Tables created while the pipeline streams. When Sluice manages the
//! publication (`create_publication: true`) and incremental snapshots are
//! on (PostgreSQL 14+, `sluice run`), the reader looks every few seconds
//! for tables the patterns match that the publication does not cover. It
//! adds each to the publication, then writes the signal for an incremental
//! snapshot of it into the WAL, after the `ALTER PUBLICATION`: changes
//! committed after that arrive through the stream, and rows written before
//! it arrive through the snapshot. The table joins without a restart and
//! without re-reading any other table. A dropped table leaves the
//! publication with it, and its changes simply end.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use sluice_config::PostgresConfig;
use sluice_core::SourceError;
use tracing::{info, warn};

use crate::catalog::{self, Matched, quote_ident, source_error};
use crate::wire::Connection;

const CHECK_INTERVAL: Duration = Duration::from_secs(5);

pub(crate) struct NewTables {
    source_id: String,
    publication: String,
    /// Where `keyless_tables: inserts_only` puts keyless tables.
    inserts_publication: String,
    patterns: Vec<String>,
    chunk_size: u64,
    /// Tables already warned about (keyless, or the steps failed), so the
    /// log says it once.
    warned: HashSet<String>,
    last: Instant,
}

impl NewTables {
    pub(crate) fn new(config: &PostgresConfig) -> Self {
        Self {
            source_id: config.id.clone(),
            publication: config.publication_name(),
            inserts_publication: config.inserts_publication_name(),
            patterns: config.tables.clone(),
            chunk_size: config.snapshot.chunk_size,
            warned: HashSet::new(),
            last: Instant::now(),
        }
    }

    /// Adds the tables the patterns match and the publication lacks, at
    /// most every [`CHECK_INTERVAL`]. A failure only delays them to the
    /// next check: it must never stop replication.
    pub(crate) async fn check(&mut self, conn: &mut Connection) {
        if self.last.elapsed() < CHECK_INTERVAL {
            return;
        }
        self.last = Instant::now();
        if let Err(e) = self.add_missing(conn).await {
            warn!(error = %e, "could not check for new tables; trying again");
        }
    }

    async fn add_missing(&mut self, conn: &mut Connection) -> Result<(), SourceError> {
        let matched = catalog::matching_tables(conn, &self.patterns).await?;
        let published = catalog::published(&matched);
        let (keyed, keyless): (Vec<&Matched>, Vec<&Matched>) =
            published.into_iter().partition(|t| !catalog::holds_keyless(t, &matched));
        let missing = catalog::uncovered(conn, &self.publication, &keyed).await?;
        for table in keyed.into_iter().filter(|t| missing.contains(&t.quoted())) {
            self.add(conn, table, &matched).await;
        }
        // A keyless table is captured through either publication, as
        // `keyless_tables` settled it at start; one in neither came later,
        // or `skip` left it out (and the start warned once already).
        let in_main = catalog::uncovered(conn, &self.publication, &keyless).await?;
        let in_inserts = catalog::uncovered(conn, &self.inserts_publication, &keyless).await?;
        for table in keyless.into_iter().filter(|t| in_main.contains(&t.quoted()) && in_inserts.contains(&t.quoted())) {
            if self.warned.insert(table.name()) {
                warn!(
                    table = table.name(),
                    "a table the patterns match has no row identity and is not captured; add a primary key, or set keyless_tables, and restart"
                );
            }
        }
        Ok(())
    }

    /// Publishes `table`, then asks for its rows: for a partitioned table,
    /// those of each partition, which go by its name.
    async fn add(&mut self, conn: &mut Connection, table: &Matched, matched: &[Matched]) {
        let name = table.name();
        let alter = format!("ALTER PUBLICATION {} ADD TABLE {}", quote_ident(&self.publication), table.quoted());
        if let Err(e) = conn.simple_query(&alter).await {
            if self.warned.insert(name.clone()) {
                let e = source_error(&format!("cannot add {name} to publication {:?}", self.publication), e);
                warn!(table = name, error = %e, "a new table matches the patterns, and could not be published; its changes are not captured until it is");
            }
            return;
        }
        let parts: Vec<String> = if table.partitioned {
            matched.iter().filter(|t| t.root.as_deref() == Some(name.as_str())).map(Matched::name).collect()
        } else {
            vec![name.clone()]
        };
        for part in parts {
            if let Err(e) = crate::incremental::signal(conn, &self.source_id, &part, self.chunk_size).await {
                warn!(table = part, error = %e, "a new table was published, but its rows written before that cannot be read by an incremental snapshot");
            }
        }
        info!(
            table = name,
            publication = self.publication,
            "a new table matches the patterns: added to the publication, with an incremental snapshot of the rows it already had"
        );
    }
}
