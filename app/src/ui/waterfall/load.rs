//! Loading what the waterfall shows: the visible window's tracks and lane (debounced; a reply to
//! a view the user has left is dropped), the minimap's lane, and the selected request's detail
//! (stalls, token times) and culprits. Hydrate builds only.

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::geometry::Viewport;
use super::interact::ARRIVED;
use super::{ROW_H, ROW_MARGIN, Selected, Selection, Wf, history};
use crate::analysis::diagnosis::Thresholds;
use crate::analysis::waterfall::Waterfall;
use crate::api::RequestDetail;
use crate::query::{build, encode, opt};
use crate::ui::canvas::now_ms;
use crate::ui::fetch::get_json;

/// Quiet time after the last change of the view before data is fetched for it.
const DEBOUNCE: Duration = Duration::from_millis(120);

/// Data for the visible window and rows, fetched after the view has been still for a moment.
pub(super) fn view(wf: Wf) {
    let generation = StoredValue::new(0u64);
    let scroll_to_focus = StoredValue::new(wf.q.with_value(|q| q.focus.is_some()));
    Effect::new(move |_| {
        let v = wf.view.get();
        let first = wf.first_row.get();
        let visible = wf.visible_rows.get();
        let compact = wf.compact.get();
        let selected = wf.selected.get();
        let pull = wf.pull.get();
        let sort = wf.sort.get();
        // Culprits matter only when they are pulled next to the selection.
        let culprits = if pull && !compact {
            wf.sel.with(|s| s.culprits.join(","))
        } else {
            String::new()
        };
        if v.width <= 1 {
            return;
        }
        generation.update_value(|g| *g += 1);
        let mine = generation.get_value();
        let instance = wf.q.with_value(|q| q.instance.clone());
        // A view without a window (or back to live before any news) asks the API for its default.
        let window = (!wf.ask_default.get_value()).then_some((v.from, v.to));
        let url = format!(
            "/api/v1/waterfall{}",
            build(&[
                ("instance", instance),
                ("from", opt(window.map(|w| w.0))),
                ("to", opt(window.map(|w| w.1))),
                ("width_px", v.width.to_string()),
                ("first_row", first.saturating_sub(ROW_MARGIN).to_string()),
                ("rows", (visible + 2 * ROW_MARGIN).to_string()),
                (
                    "compact",
                    if compact {
                        "true".into()
                    } else {
                        String::new()
                    }
                ),
                ("focus", selected.clone().unwrap_or_default()),
                ("pull", culprits),
                ("sort", if compact { String::new() } else { sort.clone() }),
            ])
        );
        set_timeout(
            move || {
                if generation.get_value() != mine {
                    return; // the view moved on
                }
                history::write(wf, v, selected, compact, pull, sort);
                spawn_local(async move {
                    let reply = get_json::<Waterfall>(url).await;
                    if generation.get_value() != mine {
                        return;
                    }
                    match reply {
                        Ok(w) => {
                            if wf.ask_default.get_value() {
                                wf.ask_default.set_value(false);
                                wf.outer.set(Some((w.from_ns, w.to_ns)));
                                wf.view.set(Viewport::new(w.from_ns, w.to_ns, v.width));
                            }
                            if let (true, Some(row)) = (scroll_to_focus.get_value(), w.focus_row) {
                                scroll_to_focus.set_value(false);
                                if let Some(sc) = wf.scroller.get_untracked() {
                                    let above = wf.visible_rows.get_untracked() / 3;
                                    sc.set_scroll_top((f64::from(row.saturating_sub(above)) * ROW_H) as i32);
                                }
                            }
                            ARRIVED.with(|a| a.set(Some(now_ms())));
                            wf.error.set(None);
                            wf.data.set(Some(w));
                            if wf.live.get_untracked() && wf.at_bottom.get_value() {
                                stay_at_bottom(wf);
                            }
                        }
                        Err(e) => wf.error.set(Some(format!("Could not load the waterfall: {e}. The last picture stays; change the view to try again."))),
                    }
                });
            },
            DEBOUNCE,
        );
    });
}

/// Keeps the rows scrolled to their end once the page has drawn the new row count, so a live
/// view shows the newest requests (the scroll then loads their rows).
fn stay_at_bottom(wf: Wf) {
    set_timeout(
        move || {
            if let Some(sc) = wf.scroller.get_untracked() {
                sc.set_scroll_top(sc.scroll_height());
            }
        },
        Duration::ZERO,
    );
}

/// The minimap: the whole window's lane, once the whole window is known.
pub(super) fn minimap(wf: Wf) {
    // Only a new width (or window) asks again; the view moving does not.
    let width = Memo::new(move |_| wf.view.with(|v| v.width));
    Effect::new(move |_| {
        let (Some((from, to)), width) = (wf.outer.get(), width.get()) else {
            return;
        };
        if width <= 1 {
            return;
        }
        let url = format!(
            "/api/v1/waterfall{}",
            build(&[
                ("instance", wf.q.with_value(|q| q.instance.clone())),
                ("from", from.to_string()),
                ("to", to.to_string()),
                ("width_px", width.to_string()),
                ("rows", "1".into()),
            ])
        );
        spawn_local(async move {
            if let Ok(m) = get_json::<Waterfall>(url).await {
                wf.minimap.set(Some(m));
            }
        });
    });
}

/// What the selected request adds to the picture: its stalls and token times (from its
/// detail) and its culprits (from its diagnosis).
pub(super) fn selection(wf: Wf, selected: Resource<Result<Option<Selected>, String>>) {
    Effect::new(move |_| {
        let Some(Ok(Some(info))) = selected.get() else {
            wf.sel.set(Selection::default());
            return;
        };
        let id = info.diagnosis.request_id.clone();
        let mut culprits: Vec<String> = info
            .diagnosis
            .findings
            .iter()
            .flat_map(|f| f.culprits.clone())
            .collect();
        culprits.sort();
        culprits.dedup();
        wf.sel.set(Selection {
            request: Some(id.clone()),
            culprits,
            ..Selection::default()
        });
        let url = format!(
            "/api/v1/requests/{}{}",
            encode(&id),
            build(&[("instance", info.instance.clone())])
        );
        spawn_local(async move {
            let Ok(d) = get_json::<RequestDetail>(url).await else {
                return;
            };
            if wf.selected.get_untracked().as_deref() != Some(d.summary.request_id.as_str()) {
                return;
            }
            let th = Thresholds::default();
            wf.sel.update(|s| {
                s.stalls = d.stalls(th.ttft_ms, th.tpot_ms);
                s.token_times = d.tokens.iter().filter_map(|t| t.emitted_ns).collect();
                // The whole request, all its parts: what F fits.
                let track = wf.data.with_untracked(|w| {
                    w.as_ref()
                        .and_then(|w| {
                            w.tracks
                                .iter()
                                .find(|t| t.request_id == d.summary.request_id)
                        })
                        .map(|t| (t.arrival_ns, t.finished_ns))
                });
                s.extent = Some(track.unwrap_or((d.summary.arrival_ns, d.finished_ns)));
            });
        });
    });
}
