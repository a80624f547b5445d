//! Native exports for the benches: 32 requests × 512 tokens with top-5 candidates (texts and
//! ids), every 16 requests sharing one iteration record per step, over four instances.

use tokenscope::fixtures;
use tokenscope::ingest::native::to_wire;
use tokenscope::proto::v1;

pub const TOKENS_PER_REQUEST: usize = 512;
pub const REQUESTS_PER_BATCH: usize = 32;
pub const TOP_K: usize = 5;
/// Instances the exports cycle through (one per sender in the end-to-end run).
pub const INSTANCES: usize = 4;
/// Requests decoded together, sharing iterations (a realistic decode batch).
pub const GROUP: usize = 16;
const T0: i64 = 1_796_022_000_000_000_000;

/// Export number `b`: its requests' ids and times follow on from export `b - 1`'s.
pub fn export(b: usize) -> v1::ExportRequest {
    let requests: Vec<_> = (0..REQUESTS_PER_BATCH)
        .map(|i| {
            let n = b * REQUESTS_PER_BATCH + i;
            let arrival = T0 + n as i64 * 37_000_000;
            let first_iteration = (n / GROUP) as u64 * 1000;
            // Shaped like vLLM's ids ("cmpl-" + 32 hex digits + "-0"): their length is what
            // iteration batches would pay for every member of every step.
            let id = format!(
                "cmpl-{:032x}-0",
                (n as u128 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835)
            );
            fixtures::request(
                &id,
                arrival,
                TOKENS_PER_REQUEST,
                TOP_K,
                first_iteration,
                n as u64,
            )
        })
        .collect();
    let iterations: Vec<_> = requests
        .chunks(GROUP)
        .flat_map(|g| fixtures::shared_iterations(g, 2))
        .collect();
    let instance = format!("bench-gpu-{}", b % INSTANCES);
    v1::ExportRequest {
        resource_traces: vec![to_wire(
            &fixtures::resource(&instance),
            &requests,
            &iterations,
        )],
    }
}
