//! Compare's GPU time by tenant: each side's tenants with their share of the side's busy time,
//! so "B is slower" can be read against "B had a tenant using twice the engine".

use leptos::prelude::*;

use super::super::format::gpu_time;
use crate::api::{CompareSide, UsageGroup};

/// Compare's usage is by tenant.
fn name(g: &UsageGroup) -> String {
    super::super::usage::label(g, "tenant")
}

pub fn table(a: &CompareSide, b: &CompareSide) -> impl IntoView + use<> {
    if a.usage.is_empty() && b.usage.is_empty() {
        return view! { <p class="empty">"No GPU time accounted on either side yet (the findings worker accounts each minute once its data has settled)."</p> }.into_any();
    }
    let mut names: Vec<String> = a.usage.iter().chain(&b.usage).map(name).collect();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    let find = |s: &CompareSide, n: &str| s.usage.iter().find(|g| name(g) == n).cloned();
    let rows = names
        .into_iter()
        .map(|n| {
            let (ga, gb) = (find(a, &n), find(b, &n));
            let cell = |g: &Option<UsageGroup>| {
                g.as_ref().map_or("–".to_string(), |g| {
                    format!("{} ({:.0} %)", gpu_time(g.gpu_s), g.share * 100.0)
                })
            };
            let share = |g: &Option<UsageGroup>| g.as_ref().map_or(0.0, |g| g.share);
            let delta = (share(&gb) - share(&ga)) * 100.0;
            let grew = delta >= 5.0;
            view! {
                <tr data-tenant=n.clone()>
                    <td>{n.clone()}</td>
                    <td class="num">{cell(&ga)}</td>
                    <td class="num">{cell(&gb)}</td>
                    <td class="num" class:bad=grew>{format!("{}{:.0} pts", if delta >= 0.0 { "+" } else { "−" }, delta.abs())}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="grid" data-testid="compare-usage">
            <thead><tr><th>"Tenant"</th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"Δ share"</th></tr></thead>
            <tbody>{rows}</tbody>
            <tfoot><tr><td>"busy time"</td><td class="num">{gpu_time(a.busy_s)}</td><td class="num">{gpu_time(b.busy_s)}</td><td></td></tr></tfoot>
        </table>
    }
    .into_any()
}
