//! CPU time spent by this process (the server and its senders) and by Postgres, from `/proc`, so
//! each run says where its time went per token.

use std::time::Duration;

/// Clock ticks of user + system time: (this process, all `postgres` processes with their reaped
/// children).
#[derive(Clone, Copy, Default)]
pub struct Cpu {
    own: u64,
    postgres: u64,
}

/// `utime stime cutime cstime` of one `/proc/<pid>/stat`, with its command name.
fn stat(path: &str) -> Option<(String, u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name is in parentheses and may contain spaces; fields follow the last ')'.
    let (head, rest) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3 of the full line, so utime (14) is index 11 here.
    let num = |k: usize| f.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Some((comm, num(11) + num(12), num(13) + num(14)))
}

impl Cpu {
    pub fn now() -> Self {
        let own = stat("/proc/self/stat").map_or(0, |(_, t, _)| t);
        let mut postgres = 0;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            if let Some((comm, t, children)) = stat(&format!("/proc/{pid}/stat"))
                && comm == "postgres"
            {
                postgres += t + children;
            }
        }
        Self { own, postgres }
    }

    /// CPU time since `earlier`: (this process, Postgres).
    pub fn since(self, earlier: Cpu) -> (Duration, Duration) {
        // Linux reports these in USER_HZ, 100 per second on every architecture it runs on here.
        let tick = |t: u64| Duration::from_millis(t * 10);
        (
            tick(self.own.saturating_sub(earlier.own)),
            tick(self.postgres.saturating_sub(earlier.postgres)),
        )
    }
}
