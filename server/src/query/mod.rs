//! The query layer: reads rows from the store, runs the pure analysis on them, and returns the
//! API's types. The HTTP handlers (`api/`) parse parameters and call in here; the store stays
//! persistence (it imports nothing from analysis or the API).

pub mod alerts;
pub mod answers;
pub mod cells;
pub mod diagnosis;
pub mod findings;
pub mod fingerprints;
pub mod incidents;
pub mod latency;
pub mod requests;
pub mod slow_set;
pub mod usage;
pub mod waterfall;
