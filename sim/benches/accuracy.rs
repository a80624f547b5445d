//! The diagnosis scored against what the simulated engine did (`tokenscope_sim::accuracy`):
//! prints the figures for docs/BENCHMARKS.md. TOKENSCOPE_ACCURACY_SEEDS sets the number of seeds
//! (default 20).

fn main() {
    let seeds: u64 = std::env::var("TOKENSCOPE_ACCURACY_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let started = std::time::Instant::now();
    let reports = tokenscope_sim::accuracy::run(seeds);
    println!(
        "# diagnosis accuracy: {seeds} seeds × {} instances × 60 s ({:.0} s)",
        tokenscope_sim::accuracy::setup_names().len(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "instances: {}",
        tokenscope_sim::accuracy::setup_names().join(", ")
    );
    for (shape, report) in &reports {
        report.print(*shape);
    }
}
