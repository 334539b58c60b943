//! The PostgreSQL source: logical replication with pgoutput. See
//! [`source`] for the data flow and the acknowledgement rules.

mod catalog;
pub mod decode;
pub mod incremental;
pub mod pgoutput;
mod snapshot;
mod source;
pub mod types;
pub mod wire;

pub use source::{PostgresSource, SourceStats, connect_params};
