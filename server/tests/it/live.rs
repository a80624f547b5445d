//! Live pages: an open stream of `/api/v1/live` hears of data stored for its instances, through
//! its own server or another on the same database, within moments; not of other instances' data
//! nor of a batch that stored nothing new; and it ends when the server stops.

use std::time::{Duration, Instant};

use crate::common::*;
use tokenscope::fixtures;

/// A reader of a server-sent-events reply.
struct Events {
    reply: reqwest::Response,
    buf: String,
}

impl Events {
    async fn open(app: &TestApp, query: &str) -> Self {
        let reply = app.get(&format!("/api/v1/live{query}")).await;
        assert_eq!(reply.status(), 200);
        assert_eq!(reply.headers()["content-type"], "text/event-stream");
        Self {
            reply,
            buf: String::new(),
        }
    }

    /// The next event (name, data) within `wait`; `None` if none came, `Some(None)` when the
    /// stream ended. Comments (keep-alives) are skipped.
    async fn next(&mut self, wait: Duration) -> Option<Option<(String, serde_json::Value)>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let field = |name: &str| {
                    block
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim_start().to_string())
                };
                if let (Some(event), Some(data)) = (field("event:"), field("data:")) {
                    return Some(Some((event, serde_json::from_str(&data).unwrap())));
                }
                continue;
            }
            match tokio::time::timeout_at(deadline, self.reply.chunk()).await {
                Err(_) => return None,
                Ok(chunk) => match chunk.expect("the stream reads") {
                    Some(bytes) => self.buf.push_str(std::str::from_utf8(&bytes).unwrap()),
                    None => return Some(None),
                },
            }
        }
    }
}

async fn post(app: &TestApp, instance: &str, id: &str, arrival_ns: i64) -> i64 {
    let r = fixtures::request(id, arrival_ns, 4, 1, 1, 7);
    let finished = r.finished_ns;
    let batch = export(&fixtures::resource(instance), &[r], &[]);
    let reply = app
        .post_json("/api/v1/traces", serde_json::to_vec(&batch).unwrap())
        .await;
    assert!(reply.status().is_success(), "{}", reply.status());
    finished
}

#[tokio::test]
async fn an_open_page_hears_its_instances_new_data_from_any_server_until_it_stops() {
    let ingest = spawn_app().await;
    let view = spawn_on(ingest.database_url.clone(), |_| {}).await;
    let mut page = Events::open(&view, "?instance=gpu-live,gpu-live-2").await;
    let (name, first) = page.next(Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(
        (name.as_str(), &first["newest_ns"]),
        ("ready", &serde_json::Value::Null)
    );
    assert_eq!(view.metrics().await["tokenscope_live_pages"], 1.0);

    // Another instance's data is not news to this page.
    post(&ingest, "gpu-elsewhere", "other-1", T0).await;
    assert!(page.next(Duration::from_millis(800)).await.is_none());

    // Its own, stored through the other server, is; with how far the data now reaches.
    let sent = Instant::now();
    let finished = post(&ingest, "gpu-live", "live-1", T0).await;
    let (name, tick) = page.next(Duration::from_secs(5)).await.unwrap().unwrap();
    let heard = sent.elapsed();
    assert_eq!(name, "ingested");
    assert_eq!(tick["newest_ns"], finished);
    assert_eq!(
        tick["instances"],
        serde_json::json!({ "gpu-live": finished })
    );
    assert!(heard < Duration::from_secs(2), "heard after {heard:?}");

    // The same batch again stores nothing new, so it says nothing.
    post(&ingest, "gpu-live", "live-1", T0).await;
    assert!(page.next(Duration::from_millis(800)).await.is_none());

    // A burst is one event or a few, never one per batch, and ends on the newest.
    let mut newest = 0;
    for k in 0..10 {
        newest = post(
            &ingest,
            "gpu-live-2",
            &format!("burst-{k}"),
            T0 + k * 1_000_000_000,
        )
        .await;
    }
    let mut events = 0;
    let mut last = serde_json::Value::Null;
    while let Some(Some((_, tick))) = page.next(Duration::from_millis(800)).await {
        events += 1;
        last = tick["newest_ns"].clone();
    }
    assert_eq!(last, newest);
    assert!(events < 10, "{events} events for 10 batches");

    // A stream of all instances hears each by name; on opening, those heard of so far.
    let mut all = Events::open(&view, "").await;
    let (name, first) = all.next(Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(name, "ready");
    for i in ["gpu-live", "gpu-live-2", "gpu-elsewhere"] {
        assert!(first["instances"][i].is_i64(), "{i} in {first}");
    }
    let finished = post(&ingest, "gpu-elsewhere", "other-2", T0 + 60_000_000_000).await;
    let (_, tick) = all.next(Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(
        tick["instances"],
        serde_json::json!({ "gpu-elsewhere": finished })
    );
    assert!(page.next(Duration::from_millis(500)).await.is_none());
    assert_eq!(view.metrics().await["tokenscope_live_pages"], 2.0);
    drop(all);

    // Stopping with the page open: the stream ends rather than holding the server up.
    let TestApp { running, .. } = view;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(running.serve_until(async {
        let _ = stopped.await;
    }));
    stop.send(()).unwrap();
    assert_eq!(page.next(Duration::from_secs(5)).await, Some(None));
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("the server returns with a live page open")
        .unwrap()
        .expect("a clean stop");
}
