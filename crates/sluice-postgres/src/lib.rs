//! The PostgreSQL source: logical replication with pgoutput. See
//! [`source`] for the data flow and the acknowledgement rules.

mod catalog;
pub mod decode;
mod hosts;
pub mod incremental;
mod new_tables;
mod partition_watch;
pub mod pgoutput;
pub mod preflight;
mod reader;
mod schema;
pub mod schema_change;
mod slot_record;
mod snapshot;
mod source;
mod start;
pub mod types;
pub use sluice_pgwire as wire;

pub use source::{PostgresSource, SourceStats, connect_params};
