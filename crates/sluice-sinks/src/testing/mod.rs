//! Sinks for unit and property tests of the coordinator, and for
//! benchmarks. Never a stand-in for a real server in integration tests.

mod fault;
mod memory;

pub use fault::{CrashSwitch, Fault, FaultPlan, FaultySink};
pub use memory::{MemoryLog, MemoryOptions, MemorySink};
