//! A sink's `delivery:` setting: what the coordinator does with a batch
//! the sink fails to write.

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Written again until the sink takes it: the sink's own guarantee.
    #[default]
    AtLeastOnce,
    /// Dropped and counted (`sluice_sink_dropped_events_total`); the
    /// checkpoint is stored before each batch is written, so no event
    /// reaches the sink twice. For telemetry that would rather lose a
    /// batch than fall behind. Optional sinks only.
    AtMostOnce,
}
