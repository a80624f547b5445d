//! The explorer's filter bar: instances, model, engine, SLO, cause, the slices (tenant, adapter,
//! priority), range (presets and absolute, in the viewer's zone), and the find box for a request
//! id or trace id.

use leptos::html;
use leptos::prelude::*;

use super::state::{ExplorerQuery, PRESETS};
use crate::analysis::diagnosis::Cause;
use crate::api::InstanceInfo;
use crate::ui::time::{Zone, input_value, parse_input};

/// Up to this many instances the bar shows each as a chip. Past it, the chosen ones, a search
/// box that adds one, and every chip folded under "all N": at a fleet's 100 instances the chips
/// took half of the first screen.
const CHIPS_UP_TO: usize = 16;

#[component]
pub fn Filters(
    instances: Vec<InstanceInfo>,
    /// The view shown (the bar is drawn anew for each).
    q: ExplorerQuery,
    go: Callback<ExplorerQuery>,
) -> impl IntoView {
    let query = StoredValue::new(q.clone());
    let zone = use_context::<RwSignal<Zone>>().unwrap_or_default();
    let mut models: Vec<String> = instances.iter().map(|i| i.model.clone()).collect();
    models.sort();
    models.dedup();
    let mut engines: Vec<String> = instances
        .iter()
        .map(|i| i.engine.as_str().to_string())
        .collect();
    engines.sort();
    engines.dedup();
    let mut versions: Vec<String> = instances
        .iter()
        .map(|i| i.engine_version.clone())
        .filter(|v| !v.is_empty())
        .collect();
    versions.sort();
    versions.dedup();
    let (from_in, to_in, find_in) = (
        NodeRef::<html::Input>::new(),
        NodeRef::<html::Input>::new(),
        NodeRef::<html::Input>::new(),
    );
    let apply_range = move |_| {
        let z = zone.get_untracked();
        let read = |r: NodeRef<html::Input>| r.get().and_then(|i| parse_input(&i.value(), &z));
        if let (Some(from), Some(to)) = (read(from_in), read(to_in))
            && from < to
        {
            go.run(query.get_value().with(|q| {
                q.range.clear();
                q.from = Some(from);
                q.to = Some(to);
            }));
        }
    };
    let find = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let v = find_in
            .get()
            .map(|i| i.value().trim().to_string())
            .unwrap_or_default();
        go.run(query.get_value().with(|q| q.find = v));
    };
    let select = move |options: Vec<String>,
                       current: String,
                       label: &'static str,
                       set: fn(&mut ExplorerQuery, String)| {
        view! {
            <label class="field">{label}
                <select on:change=move |ev| {
                    let v = event_target_value(&ev);
                    go.run(query.get_value().with(|q| set(q, v)));
                }>
                    <option value="" selected=current.is_empty()>"all"</option>
                    {options.into_iter().map(|o| {
                        let sel = o == current;
                        view! { <option value=o.clone() selected=sel>{o.clone()}</option> }
                    }).collect_view()}
                </select>
            </label>
        }
    };
    let chip = |i: &InstanceInfo| {
        let on = q.instances().contains(&i.instance.as_str());
        let href = q.toggle_instance(&i.instance).href();
        let title = format!("{} · {} · {}", i.engine.as_str(), i.model, i.role.as_str());
        view! { <a class="chip" class:on=on href=href title=title>{i.instance.clone()}</a> }
    };
    let picker = if instances.is_empty() {
        view! { <div class="chips" data-testid="instance-chips"><span class="empty">"No engine has reported yet: point its OTLP exporter (--otlp-traces-endpoint) at port 4317 of this server."</span></div> }.into_any()
    } else if instances.len() <= CHIPS_UP_TO {
        let chips = instances.iter().map(chip).collect_view();
        view! { <div class="chips" data-testid="instance-chips">{chips}</div> }.into_any()
    } else {
        let chosen = instances
            .iter()
            .filter(|i| q.instances().contains(&i.instance.as_str()))
            .map(chip)
            .collect_view();
        let every = instances.iter().map(chip).collect_view();
        let names: Vec<String> = instances.iter().map(|i| i.instance.clone()).collect();
        let options = names
            .iter()
            .map(|n| view! { <option value=n.clone()></option> })
            .collect_view();
        let n = names.len();
        // A name typed or picked from the list adds that instance; any other is marked, not sent.
        let unknown = RwSignal::new(false);
        let add = move |ev: leptos::ev::Event| {
            let v = event_target_value(&ev).trim().to_string();
            let q = query.get_value();
            unknown.set(!v.is_empty() && !names.contains(&v));
            if names.contains(&v) && !q.instances().contains(&v.as_str()) {
                go.run(q.toggle_instance(&v));
            }
        };
        view! {
            <div class="chips" data-testid="instance-chips">
                {chosen}
                <input type="search" class="slice" list="instance-names" data-testid="instance-search"
                    placeholder=format!("add one of {n}…") aria-label="Add an instance"
                    class:unknown=move || unknown.get() aria-invalid=move || unknown.get().to_string()
                    title=move || if unknown.get() { "No instance has that name" } else { "" }
                    on:change=add/>
                <datalist id="instance-names">{options}</datalist>
            </div>
            <details class="all-instances" data-testid="all-instances">
                <summary>{format!("all {n}")}</summary>
                <div class="chips">{every}</div>
            </details>
        }
        .into_any()
    };
    let presets = PRESETS
        .iter()
        .map(|&(key, label, _)| {
            let on = q.range == key;
            let href = q
                .with(|x| {
                    x.range = key.into();
                    x.from = None;
                    x.to = None;
                })
                .href();
            view! { <a class="chip" class:on=on href=href>{label}</a> }
        })
        .collect_view();
    let latest = q
        .with(|x| {
            x.range.clear();
            x.from = None;
            x.to = None;
        })
        .href();
    let latest_on = q.range.is_empty() && q.from.is_none();
    let slo_now = q.slo.clone();
    let cause_now = q.cause.clone();
    let causes = Cause::ALL
        .map(|c| {
            let (name, sel) = (c.name(), c.name() == cause_now);
            view! { <option value=name selected=sel>{name.replace('_', " ")}</option> }
        })
        .collect_view();
    // Buckets a slow-set separator narrowed to (no control of their own): each a chip that
    // removes it.
    let narrowed: Vec<_> = q
        .buckets()
        .into_iter()
        .map(|(label, without)| {
            view! { <a class="chip on" href=without.href() title="Remove this filter" data-testid="bucket-filter">{label}" ✕"</a> }
        })
        .collect();
    let (qf, qt) = (q.from, q.to);
    // A slice's text box applies when it changes (Enter or leaving it): the URL keeps it.
    let slice = move |label: &'static str,
                      current: String,
                      placeholder: &'static str,
                      set: fn(&mut ExplorerQuery, String)| {
        view! {
            <label class="field">{label}
                <input type="search" class="slice" data-testid=format!("{}-filter", label.to_lowercase())
                    placeholder=placeholder value=current
                    on:change=move |ev| {
                        let v = event_target_value(&ev).trim().to_string();
                        go.run(query.get_value().with(|q| set(q, v)));
                    }/>
            </label>
        }
    };
    view! {
        <section class="panel filters" data-testid="filters">
            <div class="filter-row">
                <span class="field-label">"Instances"</span>
                {picker}
            </div>
            <div class="filter-row">
                {select(models, q.model.clone(), "Model", |q, v| q.model = v)}
                {select(engines, q.engine.clone(), "Engine", |q, v| q.engine = v)}
                {select(versions, q.version.clone(), "Version", |q, v| q.version = v)}
                <label class="field">"SLO"
                    <select data-testid="slo-filter" on:change=move |ev| {
                        let v = event_target_value(&ev);
                        go.run(query.get_value().with(|q| q.slo = v));
                    }>
                        <option value="" selected=slo_now.is_empty()>"any"</option>
                        <option value="breach" selected=slo_now == "breach">"breached"</option>
                        <option value="met" selected=slo_now == "met">"met"</option>
                    </select>
                </label>
                <label class="field">"Cause"
                    <select data-testid="cause-filter" on:change=move |ev| {
                        let v = event_target_value(&ev);
                        go.run(query.get_value().with(|q| q.cause = v));
                    }>
                        <option value="" selected=q.cause.is_empty()>"any"</option>
                        {causes}
                    </select>
                </label>
                {slice("Tenant", q.tenant.clone(), "any", |q, v| q.tenant = v)}
                {slice("Adapter", q.adapter.clone(), "any", |q, v| q.adapter = v)}
                {slice("Priority", q.priority.clone(), "any", |q, v| q.priority = v)}
                {slice("Family", q.fingerprint.clone(), "any prompt", |q, v| q.fingerprint = v)}
                <form class="find" on:submit=find action="/" method="get">
                    <input node_ref=find_in name="find" type="search" data-testid="find"
                        placeholder="Find a request id or trace id…" value=q.find.clone()/>
                    <button type="submit">"Find"</button>
                </form>
            </div>
            {(!narrowed.is_empty()).then(|| view! {
                <div class="filter-row" data-testid="bucket-filters">
                    <span class="field-label">"Narrowed to"</span>
                    <div class="chips">{narrowed}</div>
                </div>
            })}
            <div class="filter-row">
                <span class="field-label">"Range"</span>
                <div class="chips">
                    <a class="chip" class:on=latest_on href=latest title="The hour before the newest request">"latest"</a>
                    {presets}
                </div>
                <label class="field">"from"
                    <input node_ref=from_in type="datetime-local" step="1"
                        value=move || qf.map(|t| input_value(t, &zone.get())).unwrap_or_default()/></label>
                <label class="field">"to"
                    <input node_ref=to_in type="datetime-local" step="1"
                        value=move || qt.map(|t| input_value(t, &zone.get())).unwrap_or_default()/></label>
                <button on:click=apply_range>"Apply"</button>
                <span class="zone" data-testid="zone">{move || zone.get().label()}</span>
            </div>
        </section>
    }
}
