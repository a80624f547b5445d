//! Sends prepared bodies from several concurrent senders and times each acknowledgement.

use std::future::Future;
use std::time::Instant;

use super::Run;
use super::cpu::Cpu;

/// Deals `bodies` (together carrying `tokens`) round-robin to `senders` tasks, each sending its
/// share one after another with `send`; times all of it, each body, and the CPU it took.
pub async fn drive<B, C, F, Fut>(
    tokens: usize,
    bodies: Vec<B>,
    senders: usize,
    connect: impl Fn() -> C,
    send: F,
) -> Run
where
    B: Send + 'static,
    C: Send + 'static,
    F: Fn(C, B) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = C> + Send,
{
    let mut shares: Vec<Vec<B>> = (0..senders).map(|_| Vec::new()).collect();
    for (k, b) in bodies.into_iter().enumerate() {
        shares[k % senders].push(b);
    }
    let cpu = Cpu::now();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for share in shares {
        let (send, mut client) = (send.clone(), connect());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for body in share {
                let t = Instant::now();
                client = send(client, body).await;
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.unwrap());
    }
    Run {
        tokens,
        elapsed: start.elapsed(),
        latencies,
        cpu: Cpu::now().since(cpu),
    }
}
