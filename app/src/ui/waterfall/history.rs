//! The waterfall's URL as the view moves: replaced while panning and zooming, pushed when the
//! selection changes, and followed on Back and Forward. Hydrate builds only.

use leptos::prelude::*;

use super::Wf;
use super::geometry::Viewport;
use super::state::WaterfallQuery;

/// Back and Forward: the view follows the URL. (The router does not see the entries this page
/// pushes itself, so it would not notice a return to the URL it loaded with.)
pub(super) fn follow(wf: Wf) {
    let handle = window_event_listener(leptos::ev::popstate, move |_| {
        let Some(search) = web_sys::window().and_then(|w| w.location().search().ok()) else {
            return;
        };
        let pairs = crate::query::parse(&search);
        let q =
            WaterfallQuery::from_lookup(|k| pairs.iter().find(|p| p.0 == k).map(|p| p.1.clone()));
        if q == wf.q.get_value() || q.instance != wf.q.with_value(|c| c.instance.clone()) {
            return;
        }
        let width = wf.view.get_untracked().width;
        match (q.zfrom.or(q.from), q.zto.or(q.to)) {
            (Some(from), Some(to)) => wf.steer(Viewport::new(from, to, width)),
            _ => wf.go_live(),
        }
        wf.selected.set(q.focus.clone());
        wf.compact.set(q.compact);
        wf.pull.set(q.pull);
        wf.sort.set(q.sort.clone());
        wf.q.set_value(q);
    });
    on_cleanup(move || handle.remove());
}

/// The URL is the view: replaced while the user pans and zooms, so Back leaves the page rather
/// than replaying every frame; a change of selection is pushed, so Back returns to the last one.
pub(super) fn write(
    wf: Wf,
    v: Viewport,
    selected: Option<String>,
    compact: bool,
    pull: bool,
    sort: String,
) {
    let Some(window) = web_sys::window() else {
        return;
    };
    let (q, live) = (wf.q.get_value(), wf.live.get_untracked());
    // A live view's URL has no window: opened again, it follows new data too.
    let outer = wf.outer.get_untracked().filter(|_| !live);
    let zoomed = outer.is_some_and(|o| o != (v.from, v.to));
    let next = WaterfallQuery {
        from: outer.map(|o| o.0),
        to: outer.map(|o| o.1),
        zfrom: zoomed.then_some(v.from),
        zto: zoomed.then_some(v.to),
        focus: selected.clone(),
        compact,
        pull,
        sort,
        ..q.clone()
    };
    if next == q {
        return;
    }
    let href = next.href();
    if let Ok(h) = window.history() {
        let _ = if q.focus != selected {
            h.push_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&href))
        } else {
            h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&href))
        };
    }
    wf.q.set_value(next);
}
