//! Sluice's core model: events, positions, and the contracts between
//! sources, sinks, the checkpoint store and the coordinator. No I/O lives
//! here.

pub mod checkpoint;
pub mod codec;
mod codec_meta;
pub mod dead_letter;
pub mod error;
pub mod event;
pub mod event_vecs;
pub mod failpoint;
pub mod guarantee;
pub mod history;
pub mod json;
pub mod pattern;
pub mod position;
pub mod preflight;
pub mod redact;
pub mod schema;
pub mod schema_change;
pub mod settings;
pub mod sink;
pub mod snapshot;
pub mod source;
pub mod stack_text;
pub mod state;
pub mod sync;
pub mod time;
pub mod tx_place;
pub mod value;

pub use checkpoint::{CheckpointKey, CheckpointStore};
pub use dead_letter::{DeadLetter, DeadLetterQueue};
pub use error::{BoxError, SinkError, SinkFenced, SourceError, StoreError};
pub use event::{Envelope, Event, EventId, MessageShape, OldKey, Op, Shape};
pub use guarantee::Guarantee;
pub use pattern::glob_match;
pub use position::{BinlogPos, Lsn, Position, PositionParseError, binlog_file_index, or_start};
pub use schema::{ColumnSchema, ColumnType, Origin, TableSchema};
pub use sink::{EventChunks, SharedValue, SharedWork, Sink, SliceChunks, collect_chunks};
pub use snapshot::SnapshotPos;
pub use source::{AckWatermark, LogStats, Source, SourceStatus};
pub use stack_text::StackText;
pub use state::{FileState, StateDir, StateStore};
pub use tx_place::{TxCounter, TxCounts, TxPlace};
pub use value::{Columns, CompactString, JsonText, Row, ToCompactString, Value, format_compact};
