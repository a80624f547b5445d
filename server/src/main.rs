//! The `tokenscope` binary: parses the command line and runs it.

use clap::Parser;

/// mimalloc rather than glibc's malloc: ingest allocates and frees millions of small strings a
/// second (token texts, candidates), and this halved the server's CPU per OTLP token.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Rendering a page walks its view tree recursively; the largest (an incident holding a
/// request's whole page) needs more than the default 2 MiB of stack in debug builds.
const WORKER_STACK_BYTES: usize = 16 << 20;

fn main() -> std::process::ExitCode {
    let cli = tokenscope::cli::Cli::parse();
    tokenscope::logging::init(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK_BYTES)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokenscope: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(tokenscope::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokenscope: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
