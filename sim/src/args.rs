//! `tokenscope sim`'s arguments (the server's command line embeds them).

use clap::Args;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// A named incident scenario (with its healthy control), or "all".
    #[arg(long)]
    pub scenario: Option<String>,
    /// Synthetic Poisson traffic: requests per second.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Alternate the synthetic rate between 3× and ⅓× every ten seconds.
    #[arg(long)]
    pub bursty: bool,
    /// Seconds of synthetic traffic.
    #[arg(long, default_value_t = 60.0)]
    pub duration_s: f64,
    /// Replay a real trace: an Azure LLM 2023 CSV or a Mooncake JSONL (told apart by content),
    /// or "azure-conv-5min" for the slice bundled in the binary.
    #[arg(long)]
    pub replay: Option<String>,
    /// Replay window: start (seconds into the trace) and length.
    #[arg(long, default_value_t = 0.0)]
    pub window_start_s: f64,
    #[arg(long, default_value_t = 3600.0)]
    pub window_s: f64,
    /// Delivery pace: simulated time runs this many times faster than the wall clock while
    /// sending (60 replays an hour in a minute); `inf` sends as fast as ingest takes it.
    #[arg(long, default_value_t = f64::INFINITY)]
    pub speed: f64,
    /// GPU/model profile of the cost model.
    #[arg(long, default_value = "llama-8b-h100")]
    pub profile: String,
    #[arg(long, default_value = "sim-0")]
    pub instance: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Unix nanoseconds of the first arrival (default: the traffic ends about now).
    #[arg(long)]
    pub start_ns: Option<i64>,
    /// tokenscope gRPC endpoint to send to.
    #[arg(long, default_value = "http://127.0.0.1:4317")]
    pub send: String,
    /// Write the traces to this JSONL file (import with `--format native`) instead of sending.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Write the scenarios' ground truth (victims, cause, culprits) as JSON to this file.
    #[arg(long)]
    pub truth: Option<std::path::PathBuf>,
}
