//! Pure analysis over the trace model (no IO; builds for wasm32): metrics, stages, token views.

pub mod answers;
pub mod compare;
pub mod diagnosis;
pub mod fingerprint;
pub mod metrics;
pub mod pd;
pub mod slow_set;
pub mod stages;
pub mod token_view;
pub mod usage;
pub mod waterfall;
