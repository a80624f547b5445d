//! Following new data (`GET /api/v1/live`, server-sent events). The tabs of a browser share one
//! stream through a shared worker (`public/live-worker.js`): a browser opens at most six HTTP/1.1
//! connections to a server, so a stream per tab would stall the seventh tab. Without shared
//! workers, a page opens its own stream. The browser reconnects a dropped stream by itself; the
//! server then says `ready` again, and the page reads its view again in case it missed news.

use leptos::prelude::*;

use crate::model::Nanos;

/// The stream's state, for the page's "live" badge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Link {
    #[default]
    Connecting,
    Open,
    /// Cut off; the browser is trying again.
    Lost,
}

impl Link {
    /// As the page's `data-link` attribute says it (what the tests wait on).
    pub fn name(self) -> &'static str {
        match self {
            Link::Connecting => "connecting",
            Link::Open => "open",
            Link::Lost => "lost",
        }
    }
}

/// The badge of a page that follows new data: "● live", with what following means there as its
/// `title`, or "● reconnecting…" while the stream is cut off.
#[component]
pub fn Badge(link: RwSignal<Link>, title: &'static str) -> impl IntoView {
    move || {
        let l = link.get();
        let (class, text, title) = match l {
            Link::Lost => (
                "live lost",
                "● reconnecting…",
                "The live stream was cut off; the browser is reconnecting.",
            ),
            _ => ("live on", "● live", title),
        };
        view! { <span class=class data-testid="live" data-link=l.name() title=title>{text}</span> }
    }
}

/// What a page has heard: how far its instances' data reaches, and whether it has been told
/// `ready` (the first `ready` only opens the stream: the page has just read its view).
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
struct Heard {
    newest: Option<Nanos>,
    ready: bool,
}

#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
impl Heard {
    /// Takes in one event; returns whether the page should read its view again.
    fn event(&mut self, shows: &[String], event: &str, data: &str) -> bool {
        let Ok(t) = serde_json::from_str::<crate::api::LiveTick>(data) else {
            return false;
        };
        let grew = t
            .instances
            .iter()
            .filter(|(k, _)| shows.is_empty() || shows.contains(k))
            .map(|(_, &v)| v)
            .max();
        self.newest = self.newest.max(grew);
        match event {
            "ready" => std::mem::replace(&mut self.ready, true),
            _ => grew.is_some(),
        }
    }
}

/// Follows `instances` (comma-separated; empty: all): keeps `link` up to date and calls `news`
/// with how far their data reaches whenever the page should read its view again.
#[cfg(feature = "hydrate")]
pub fn follow(instances: &str, link: RwSignal<Link>, news: impl Fn(Option<Nanos>) + 'static) {
    use std::cell::RefCell;
    use std::rc::Rc;

    let shows: Vec<String> = instances
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let heard = Rc::new(RefCell::new(Heard::default()));
    let on_event = move |event: &str, data: &str| {
        if event == "link" {
            link.set(match data {
                "open" => Link::Open,
                "lost" => Link::Lost,
                _ => Link::Connecting,
            });
            return;
        }
        if link.get_untracked() != Link::Open {
            link.set(Link::Open);
        }
        let again = heard.borrow_mut().event(&shows, event, data);
        if again {
            let newest = heard.borrow().newest;
            news(newest);
        }
    };
    let on_event = Rc::new(on_event);
    let shared = on_event.clone();
    if !browser::shared(instances, move |e, d| shared(e, d)) {
        browser::own(instances, link, move |e, d| on_event(e, d));
    }
}

/// The server-rendered page does not follow: hydration starts the stream.
#[cfg(not(feature = "hydrate"))]
pub fn follow(_instances: &str, _link: RwSignal<Link>, _news: impl Fn(Option<Nanos>) + 'static) {}

#[cfg(feature = "hydrate")]
mod browser {
    use leptos::prelude::*;
    use send_wrapper::SendWrapper;
    use wasm_bindgen::JsValue;

    use super::Link;
    use crate::ui::canvas::on;

    fn field(v: &JsValue, name: &str) -> Option<String> {
        js_sys::Reflect::get(v, &JsValue::from_str(name))
            .ok()?
            .as_string()
    }

    /// Through the browser's shared worker; false where there is none.
    pub fn shared(instances: &str, on_event: impl Fn(&str, &str) + 'static) -> bool {
        let Ok(worker) = web_sys::SharedWorker::new("/live-worker.js") else {
            return false;
        };
        let port = worker.port();
        on(&port, "message", move |m: web_sys::MessageEvent| {
            let d = m.data();
            if let (Some(event), Some(data)) = (field(&d, "event"), field(&d, "data")) {
                on_event(&event, &data);
            }
        });
        port.start();
        let subscribe = js_sys::Object::new();
        let list: js_sys::Array = instances
            .split(',')
            .filter(|s| !s.is_empty())
            .map(JsValue::from_str)
            .collect();
        let _ = js_sys::Reflect::set(&subscribe, &"subscribe".into(), &list);
        let _ = port.post_message(&subscribe);
        let port = SendWrapper::new(port);
        on_cleanup(move || {
            let bye = js_sys::Object::new();
            let _ = js_sys::Reflect::set(&bye, &"bye".into(), &JsValue::TRUE);
            let _ = port.post_message(&bye);
            port.close();
        });
        true
    }

    /// A stream of the page's own.
    pub fn own(instances: &str, link: RwSignal<Link>, on_event: impl Fn(&str, &str) + 'static) {
        let url = format!(
            "/api/v1/live{}",
            crate::query::build(&[("instance", instances.to_string())])
        );
        let Ok(source) = web_sys::EventSource::new(&url) else {
            link.set(Link::Lost);
            return;
        };
        let on_event = std::rc::Rc::new(on_event);
        for name in ["ready", "ingested"] {
            let on_event = on_event.clone();
            on(&source, name, move |e: web_sys::MessageEvent| {
                on_event(name, &e.data().as_string().unwrap_or_default());
            });
        }
        on(&source, "error", move |_: web_sys::Event| {
            link.set(Link::Lost)
        });
        let source = SendWrapper::new(source);
        on_cleanup(move || source.close());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_reads_again_on_news_of_its_instances_and_on_a_second_ready() {
        let shows = vec!["a".to_string()];
        let mut h = Heard::default();
        let t = |newest: &str, instances: &str| {
            format!(r#"{{"newest_ns":{newest},"instances":{{{instances}}}}}"#)
        };
        // Opening: nothing to read again, but what it says is kept.
        assert!(!h.event(&shows, "ready", &t("5", r#""a":5,"b":9"#)));
        assert_eq!(h.newest, Some(5));
        // Another instance's news is not the page's.
        assert!(!h.event(&shows, "ingested", &t("12", r#""b":12"#)));
        // Its own is, with nanoseconds past a JavaScript number's precision kept exact.
        assert!(h.event(
            &shows,
            "ingested",
            &t("1796022000000000001", r#""a":1796022000000000001"#)
        ));
        assert_eq!(h.newest, Some(1_796_022_000_000_000_001));
        // A later ready (the server may have missed news) reads again.
        assert!(h.event(&shows, "ready", &t("null", "")));
        assert!(!h.event(&shows, "ingested", "not json"));
    }
}
