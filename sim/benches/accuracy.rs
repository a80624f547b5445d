//! The diagnosis scored against what the simulated engine did (`tokenscope_sim::accuracy`):
//! prints the figures for docs/BENCHMARKS.md. TOKENSCOPE_ACCURACY_SEEDS sets the number of seeds
//! (default 100: a culprits-exact figure near 0.95 over 15,000 victims is ±0.002, over 20 seeds
//! ±0.004); TOKENSCOPE_ACCURACY_MODEL_UNKNOWN=1 keeps the simulated model's name from the
//! diagnosis (prompts costed with the default attention constant, as for an unlisted model).

fn main() {
    let seeds: u64 = std::env::var("TOKENSCOPE_ACCURACY_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let unknown = std::env::var_os("TOKENSCOPE_ACCURACY_MODEL_UNKNOWN").is_some();
    let started = std::time::Instant::now();
    let reports = tokenscope_sim::accuracy::run(seeds, unknown);
    println!(
        "# diagnosis accuracy: {seeds} seeds × {} instances × 60 s ({:.0} s)",
        tokenscope_sim::accuracy::setup_names().len(),
        started.elapsed().as_secs_f64()
    );
    if unknown {
        println!("model: unknown to the diagnosis (default attention constant)");
    }
    println!(
        "instances: {}",
        tokenscope_sim::accuracy::setup_names().join(", ")
    );
    for (shape, report) in &reports {
        report.print(*shape);
    }
}
