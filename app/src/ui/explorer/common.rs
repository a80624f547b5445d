//! "What the slow requests have in common": the attribute values far more common among the
//! window's slow requests than among the rest, most surely first, each one click from a filter.

use leptos::prelude::*;

use super::state::ExplorerQuery;
use crate::api::{Attribute, Separator, SlowSet};
use crate::ui::format::thousands;

/// The view filtered to requests with `value` of `attribute`, when the explorer can filter by it.
fn filtered(q: &ExplorerQuery, attribute: Attribute, value: &str) -> Option<ExplorerQuery> {
    let params = attribute.filter(value);
    (!params.is_empty()).then(|| {
        q.with(|q| {
            for (k, v) in params {
                q.set(k, v);
            }
        })
    })
}

fn percent(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

/// The panel when open: the set's size and definition, then the separators.
#[component]
pub fn SlowSetPanel(set: SlowSet, query: ExplorerQuery) -> impl IntoView {
    let close = query.with(|q| q.common = false).href();
    let head = format!(
        "{} slow ({}) against {} others in this window.",
        thousands(set.slow),
        set.definition,
        thousands(set.rest)
    );
    // The answer first: what most surely sets the slow requests apart.
    let lead = set.separators.first().map(|s| {
        view! {
            <p class="common-lead" data-testid="slow-set-lead">
                <b>{format!("{} {}", s.attribute.label(), s.label)}</b>
                {format!(
                    " is on {} of the slow requests and {} of the others.",
                    percent(s.slow_share),
                    percent(s.rest_share)
                )}
            </p>
        }
    });
    let body = if set.slow == 0 {
        view! { <p class="empty">"No request in this window was slow, so nothing sets slow ones apart."</p> }
            .into_any()
    } else if set.separators.is_empty() {
        view! { <p class="empty">"Nothing sets the slow requests apart: every instance, version, tenant, prompt length and load at arrival is about as common among the rest."</p> }
            .into_any()
    } else {
        let rows = set
            .separators
            .iter()
            .map(|s| row(s, &set, &query))
            .collect_view();
        view! {
            <table class="common-table">
                <thead><tr>
                    <th>"Attribute"</th><th>"Value"</th><th>"Among slow / others"</th>
                    <th class="num">"Slow"</th><th class="num">"Others"</th><th class="num">"How much more often"</th>
                </tr></thead>
                <tbody>{rows}</tbody>
            </table>
        }
        .into_any()
    };
    let definition = definition_form(&query);
    view! {
        <section class="panel common" data-testid="slow-set">
            <div class="chart-head">
                <h2>"What the slow requests have in common"</h2>
                {definition}
                <a class="hint" href=close>"hide"</a>
            </div>
            {lead}
            <p class="common-head" data-testid="slow-set-head">{head}</p>
            {body}
        </section>
    }
}

fn row(s: &Separator, set: &SlowSet, query: &ExplorerQuery) -> impl IntoView + use<> {
    let value = match s
        .value
        .as_deref()
        .and_then(|v| filtered(query, s.attribute, v))
    {
        Some(q) => {
            view! { <a href=q.href() title="Show only these requests">{s.label.clone()}</a> }
                .into_any()
        }
        None => view! { <span>{s.label.clone()}</span> }.into_any(),
    };
    let more = match s.lift {
        Some(l) => format!("×{l:.1}"),
        None => "only among the slow".into(),
    };
    let sure = format!(
        "{:+.0} to {:+.0} points (95 %)",
        s.low * 100.0,
        s.high * 100.0
    );
    let sure_title = sure.clone();
    let slow_w = format!("width:{:.1}%", s.slow_share * 100.0);
    let rest_w = format!("width:{:.1}%", s.rest_share * 100.0);
    view! {
        <tr data-testid="common-row" data-attribute=s.attribute.key()>
            <td class="attr">{s.attribute.label()}</td>
            <td class="value" data-testid="common-value">{value}</td>
            <td class="shares">
                <div class="share slow" title=format!("{} of the slow requests", percent(s.slow_share))><i style=slow_w></i></div>
                <div class="share rest" title=format!("{} of the others", percent(s.rest_share))><i style=rest_w></i></div>
            </td>
            <td class="num">{format!("{} of {} ({})", thousands(s.slow), thousands(set.slow), percent(s.slow_share))}</td>
            <td class="num">{format!("{} of {} ({})", thousands(s.rest), thousands(set.rest), percent(s.rest_share))}</td>
            <td class="num" title=sure_title><b>{more}</b><span class="sure">{sure}</span></td>
        </tr>
    }
}

/// What "slow" means: an SLO broken (the default), or a range of TTFT, TPOT or end-to-end
/// time in ms. A plain GET form: the view's other parameters ride along hidden, so it works
/// before the page's script has loaded.
fn definition_form(q: &ExplorerQuery) -> impl IntoView + use<> {
    let kept: Vec<(String, String)> = crate::query::parse(q.href().trim_start_matches("/?"))
        .into_iter()
        .filter(|(k, _)| !matches!(k.as_str(), "slow" | "slow_min" | "slow_max" | "page"))
        .collect();
    let hidden = kept
        .into_iter()
        .map(|(k, v)| view! { <input type="hidden" name=k value=v/> })
        .collect_view();
    let opt = |value: &'static str, label: &'static str| {
        let selected = q.slow == value;
        view! { <option value=value selected=selected>{label}</option> }
    };
    view! {
        <form class="slow-def" method="get" action="/" data-testid="slow-def">
            {hidden}
            <label>"Slow means "
                <select name="slow" data-testid="slow-kind">
                    {opt("", "an SLO broken")}{opt("ttft", "TTFT")}{opt("tpot", "TPOT")}{opt("e2e", "end to end")}
                </select></label>
            <label>" from "<input name="slow_min" inputmode="decimal" size="6" value=q.slow_min.clone() data-testid="slow-min"/></label>
            <label>" to "<input name="slow_max" inputmode="decimal" size="6" placeholder="any" value=q.slow_max.clone() data-testid="slow-max"/>" ms "</label>
            <button type="submit">"Apply"</button>
        </form>
    }
}

/// The button that opens the panel.
#[component]
pub fn OpenSlowSet(query: ExplorerQuery) -> impl IntoView {
    let open = query.with(|q| q.common = true).href();
    view! {
        <a class="common-open" href=open data-testid="slow-set-open">"What do the slow requests have in common?"</a>
    }
}
