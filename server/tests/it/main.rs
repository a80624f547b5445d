//! The integration tests, one binary: the real server on loopback against a real Postgres.
//!
//! One binary instead of one per file: each linked test binary carries the whole server (1.3 GB
//! with debug info each), and fifteen of them filled CI's disk and spent minutes linking.

mod access;
mod alerts;
mod answers;
mod batch_refs;
mod budget;
mod common;
mod compare_words;
mod diagnosis;
mod diagnosis_snapshots;
mod durability;
mod explorer_api;
mod export;
mod findings;
mod fingerprints;
mod import;
mod incidents;
mod ingest_batches;
mod ingest_roundtrip;
mod latency;
mod latency_cells;
mod live;
mod logs;
mod metrics;
mod migrations;
mod otlp_ingest;
mod pd_clocks;
mod query_api;
mod redact;
mod replicas;
mod scoped;
mod security_headers;
mod shutdown;
mod sim_scenarios;
mod slices;
mod slow_set;
mod speculation;
mod texts_by_id;
mod usage;
mod waterfall_lane;
