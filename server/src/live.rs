//! Live pages: which instances got new data, pushed to the pages open on them. One listener per
//! server hears every committed write (the store's `tokenscope_ingest` notices, so writes through
//! any server count) and keeps the newest time per instance in a watch channel; each open page
//! holds a receiver. An idle page is a parked task, and a slow page is only ever told the latest
//! state: a watch keeps one value, so nothing queues behind a browser that does not read.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use tokenscope_core::api::LiveTick;
use tokenscope_core::model::Nanos;

use crate::store::{IngestListener, Store};

/// The least time between two events of one page: a burst of writes is one event, and a page
/// re-reads its view at most this often (the view itself fetches for the visible window).
pub const GAP: Duration = Duration::from_millis(250);

/// How long the listener waits before connecting again after its connection failed.
const RECONNECT: Duration = Duration::from_secs(1);

/// What the server has heard: the newest time per instance key, and how many times it may have
/// missed notices (a dropped connection), after which every page should re-read.
#[derive(Clone, Debug, Default)]
pub struct Newest {
    by_instance: Arc<HashMap<String, Nanos>>,
    resyncs: u64,
}

impl Newest {
    /// The instances of `instances` (all: empty) heard of, with how far each reaches.
    fn matching(&self, instances: &[String]) -> BTreeMap<String, Nanos> {
        self.by_instance
            .iter()
            .filter(|(k, _)| instances.is_empty() || instances.contains(k))
            .map(|(k, &v)| (k.clone(), v))
            .collect()
    }
}

/// The server's side of live pages: what it has heard, and whether it is stopping (an open
/// stream would otherwise hold graceful shutdown forever).
#[derive(Clone)]
pub struct Live {
    newest: watch::Receiver<Newest>,
    stopping: watch::Receiver<bool>,
    /// Pages open now (`/metrics`).
    open: Arc<AtomicUsize>,
}

impl Live {
    /// Starts listening on `store` (listening already when this returns, so no write committed
    /// after it is missed); streams end once `stopping` turns true.
    pub async fn start(
        store: Store,
        stopping: watch::Receiver<bool>,
    ) -> crate::error::Result<Self> {
        let (tx, newest) = watch::channel(Newest::default());
        let first = store.listen_ingest().await?;
        tokio::spawn(listen(store, first, tx, stopping.clone()));
        Ok(Self {
            newest,
            stopping,
            open: Arc::default(),
        })
    }

    /// How many pages follow now.
    pub fn pages(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// One page's stream over `instances` (all: empty).
    pub fn follow(&self, instances: Vec<String>) -> Follow {
        let mut newest = self.newest.clone();
        let (sent, resyncs) = {
            let n = newest.borrow_and_update();
            (n.matching(&instances), n.resyncs)
        };
        self.open.fetch_add(1, Ordering::Relaxed);
        Follow {
            _open: Open(self.open.clone()),
            newest,
            stopping: self.stopping.clone(),
            instances,
            sent,
            resyncs,
            last: None,
        }
    }
}

/// Hears the store's notices until the server stops, reconnecting after a failure.
async fn listen(
    store: Store,
    first: IngestListener,
    tx: watch::Sender<Newest>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut connected = Some(first);
    loop {
        tokio::select! {
            r = hear(&store, connected.take(), &tx) => {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "live: the ingest listener failed; connecting again");
                }
                tx.send_modify(|n| n.resyncs += 1);
            }
            _ = stopping.wait_for(|s| *s) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(RECONNECT) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// Passes the store's notices on, until the connection fails.
async fn hear(
    store: &Store,
    connected: Option<IngestListener>,
    tx: &watch::Sender<Newest>,
) -> crate::store::Result<()> {
    let mut l = match connected {
        Some(l) => l,
        None => store.listen_ingest().await?,
    };
    loop {
        match l.next().await? {
            Some(i) => tx.send_modify(|n| {
                let by = Arc::make_mut(&mut n.by_instance);
                let e = by.entry(i.instance).or_insert(i.newest_ns);
                *e = (*e).max(i.newest_ns);
            }),
            // Reconnected: what came meanwhile is unknown.
            None => tx.send_modify(|n| n.resyncs += 1),
        }
    }
}

/// One open page's view of what the server hears.
pub struct Follow {
    _open: Open,
    newest: watch::Receiver<Newest>,
    stopping: watch::Receiver<bool>,
    instances: Vec<String>,
    /// What the page was last told, per instance.
    sent: BTreeMap<String, Nanos>,
    resyncs: u64,
    last: Option<Instant>,
}

/// Counts a page as open until its stream is dropped (the browser went away, or the server stops).
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a stream says next.
#[derive(Debug, PartialEq)]
pub enum Said {
    /// Read everything again (`ready`): the stream opened, or the server may have missed news.
    Ready(LiveTick),
    /// These instances' data grew (`ingested`).
    Ingested(LiveTick),
}

impl Follow {
    /// What the page is told on opening: every instance of its own heard of so far.
    pub fn first(&self) -> LiveTick {
        tick(self.sent.clone(), &self.sent)
    }

    /// The next change of the page's instances, no sooner than `GAP` after the last; `None` when
    /// the server stops.
    pub async fn next(&mut self) -> Option<Said> {
        loop {
            if let Some(last) = self.last {
                tokio::select! {
                    _ = tokio::time::sleep_until(last + GAP) => {}
                    _ = self.stopping.wait_for(|s| *s) => return None,
                }
            }
            tokio::select! {
                r = self.newest.changed() => r.ok()?,
                _ = self.stopping.wait_for(|s| *s) => return None,
            }
            let (now, resyncs) = {
                let n = self.newest.borrow_and_update();
                (n.matching(&self.instances), n.resyncs)
            };
            let grew: BTreeMap<String, Nanos> = now
                .iter()
                .filter(|&(k, v)| self.sent.get(k).is_none_or(|s| v > s))
                .map(|(k, &v)| (k.clone(), v))
                .collect();
            let resynced = resyncs != self.resyncs;
            if grew.is_empty() && !resynced {
                continue;
            }
            (self.sent, self.resyncs) = (now, resyncs);
            self.last = Some(Instant::now());
            return Some(if resynced {
                Said::Ready(tick(self.sent.clone(), &self.sent))
            } else {
                Said::Ingested(tick(grew, &self.sent))
            });
        }
    }
}

/// A tick naming `changed`, with the newest time over all of `known`.
fn tick(changed: BTreeMap<String, Nanos>, known: &BTreeMap<String, Nanos>) -> LiveTick {
    LiveTick {
        newest_ns: known.values().copied().max(),
        instances: changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn newest(pairs: &[(&str, Nanos)], resyncs: u64) -> Newest {
        Newest {
            by_instance: Arc::new(pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()),
            resyncs,
        }
    }

    fn said(s: Option<Said>) -> (bool, Option<Nanos>, Vec<(String, Nanos)>) {
        let (ready, t) = match s.expect("an event") {
            Said::Ready(t) => (true, t),
            Said::Ingested(t) => (false, t),
        };
        (ready, t.newest_ns, t.instances.into_iter().collect())
    }

    #[tokio::test]
    async fn a_page_hears_its_instances_once_per_gap_and_never_a_backlog() {
        let (tx, rx) = watch::channel(newest(&[("a", 10)], 0));
        let (_stop, stopping) = watch::channel(false);
        let live = Live {
            newest: rx,
            stopping,
            open: Arc::default(),
        };
        let mut page = live.follow(vec!["a".into(), "c".into()]);
        assert_eq!(page.first().newest_ns, Some(10));

        // Another instance's data is not news to this page; its own is, named.
        tx.send(newest(&[("a", 10), ("b", 99)], 0)).unwrap();
        tx.send(newest(&[("a", 20), ("b", 99)], 0)).unwrap();
        assert_eq!(
            said(page.next().await),
            (false, Some(20), vec![("a".into(), 20)])
        );

        // A burst within the gap is one event, with its latest values.
        let opened = Instant::now();
        for t in 21..=30 {
            tx.send(newest(&[("a", t), ("c", 5)], 0)).unwrap();
        }
        assert_eq!(
            said(page.next().await),
            (false, Some(30), vec![("a".into(), 30), ("c".into(), 5)])
        );
        assert!(Instant::now() >= opened + GAP);

        // A reconnect of the listener tells every page to read again, news or not.
        tx.send(newest(&[("a", 30), ("c", 5)], 1)).unwrap();
        assert_eq!(
            said(page.next().await),
            (true, Some(30), vec![("a".into(), 30), ("c".into(), 5)])
        );
    }

    #[tokio::test]
    async fn a_page_without_instances_follows_all_and_ends_when_the_server_stops() {
        let (tx, rx) = watch::channel(Newest::default());
        let (stop, stopping) = watch::channel(false);
        let live = Live {
            newest: rx,
            stopping,
            open: Arc::default(),
        };
        let mut page = live.follow(Vec::new());
        assert_eq!(live.pages(), 1);
        assert_eq!(page.first().newest_ns, None);
        tx.send(newest(&[("x", 5), ("y", 7)], 0)).unwrap();
        assert_eq!(
            said(page.next().await),
            (false, Some(7), vec![("x".into(), 5), ("y".into(), 7)])
        );
        stop.send(true).unwrap();
        assert!(page.next().await.is_none());
        drop(page);
        assert_eq!(live.pages(), 0);
    }
}
