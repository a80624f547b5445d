//! The two sides' choosers: instance(s), engine, model, tenant, adapter and window of A and of B, in the viewer's
//! zone. Submitting navigates, so the comparison is a link.

use leptos::html;
use leptos::prelude::*;
use leptos_router::hooks::use_navigate;

use super::KEYS;
use crate::api::CompareSide;
use crate::query::build;
use crate::ui::time::{Zone, input_value, parse_input};

#[component]
pub fn SideForm(current: Option<(CompareSide, CompareSide)>) -> impl IntoView {
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let inputs: Vec<NodeRef<html::Input>> = KEYS.iter().map(|_| NodeRef::new()).collect();
    let navigate = use_navigate();
    let refs = inputs.clone();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let z = zone.get_untracked();
        let pairs: Vec<(&str, String)> = KEYS
            .iter()
            .zip(&refs)
            .map(|(&k, r)| {
                let v = r.get().map(|i| i.value()).unwrap_or_default();
                // Windows are typed as local times and travel as Unix nanoseconds.
                let v = if k.ends_with("_from") || k.ends_with("_to") {
                    parse_input(&v, &z)
                        .map(|t| t.to_string())
                        .unwrap_or_default()
                } else {
                    v
                };
                (k, v)
            })
            .collect();
        navigate(&format!("/compare{}", build(&pairs)), Default::default());
    };
    let value = move |side: Option<&CompareSide>, field: &str| -> String {
        let Some(s) = side else { return String::new() };
        match field {
            "instance" => s.instances.join(","),
            "engine" => s.engine.clone().unwrap_or_default(),
            "engine_version" => s.engine_version.clone().unwrap_or_default(),
            "model" => s.model.clone().unwrap_or_default(),
            "tenant" => s.tenant.clone().unwrap_or_default(),
            "adapter" => s.lora_adapter.clone().unwrap_or_default(),
            "fingerprint" => s.fingerprint.clone().unwrap_or_default(),
            "from" => input_value(s.from_ns, &zone.get_untracked()),
            _ => input_value(s.to_ns, &zone.get_untracked()),
        }
    };
    // One row a side: A's choosers, then B's.
    let mut rows: Vec<Vec<AnyView>> = vec![Vec::new(), Vec::new()];
    for (&k, r) in KEYS.iter().zip(inputs) {
        let (side, field) = k.split_once('_').unwrap_or(("a", k));
        let cur = current
            .as_ref()
            .map(|(a, b)| if side == "a" { a } else { b });
        let kind = if field == "from" || field == "to" {
            "datetime-local"
        } else {
            "text"
        };
        let placeholder = if kind == "text" { "any" } else { "" };
        rows[usize::from(side == "b")].push(
            view! {
                <label class="field">{format!("{} {}", side.to_uppercase(), field.replace('_', " "))}
                    <input node_ref=r type=kind step="1" name=k data-testid=k placeholder=placeholder value=value(cur, field)/></label>
            }
            .into_any(),
        );
    }
    let fields = rows
        .into_iter()
        .map(|row| view! { <div class="side-row">{row}</div> })
        .collect_view();
    view! {
        <form class="compare-form" on:submit=submit>
            {fields}
            <button type="submit" data-testid="compare-submit">"Compare"</button>
            <span class="muted">"Empty windows: B is the hour before the newest request; A the hour before B, or the same hour when the sides are different tenants or adapters."</span>
        </form>
    }
}
