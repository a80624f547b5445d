#![recursion_limit = "256"]
//! The tokenscope server: ingest (gRPC + HTTP), Postgres storage, the query API and the UI host.

pub mod access;
pub mod api;
pub mod cli;
pub mod clock;
pub mod demo;
pub mod error;
pub mod export;
pub mod findings;
pub mod fixtures;
pub mod fuzz;
pub mod ingest;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod query;
pub mod security;
pub mod server;
pub mod state;
/// Storage is its own crate (`store/`); this keeps `tokenscope::store` paths working.
pub use tokenscope_store as store;
