//! `GET /api/v1/compare`: two sets of requests (two windows, instances, models or engines) side
//! by side, for "what changed after Tuesday's deploy".

use std::collections::HashMap;

use axum::{
    Json,
    extract::{Query, State},
};

use tokenscope_core::analysis::compare::{deltas, headline};
use tokenscope_core::api::Comparison;
use tokenscope_core::model::Nanos;

use super::{ListParams, ThresholdParams, width_px};
use crate::access::Scope;
use crate::error::{Error, Result};
use crate::query::{answers, latency};
use crate::store::{RequestFilter, Store};

/// A side without a window: B is the hour (or `span_s`) before the newest request, A the same
/// length before B, or B's own window when the sides are different slices (tenant, adapter,
/// priority).
const DEFAULT_WINDOW_NS: Nanos = 3600 * 1_000_000_000;

/// `a_instance=&a_engine=&a_engine_version=&a_model=&a_tenant=&a_adapter=&a_priority=&a_fingerprint=&a_from=&a_to=`
/// and the same with `b_`, plus `width_px`
/// (of the charts), `ttft_ms` and `tpot_ms` (the SLOs of both sides), and `span_s`: the length
/// of a side whose window is not given (default an hour).
pub(super) async fn compare(
    State(store): State<Store>,
    scope: Scope,
    Query(mut p): Query<HashMap<String, String>>,
) -> Result<Json<Comparison>> {
    let width = width_px(p.get("width_px").map(String::as_str), 600, 5_000)?;
    let th = ThresholdParams {
        ttft_ms: p.remove("ttft_ms"),
        tpot_ms: p.remove("tpot_ms"),
        ..ThresholdParams::default()
    }
    .thresholds()?;
    let span = match p.remove("span_s").filter(|v| !v.is_empty()) {
        None => DEFAULT_WINDOW_NS,
        Some(v) => match v.parse::<f64>() {
            Ok(s) if s > 0.0 && s < 1e7 => (s * 1e9) as Nanos,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "span_s={v:?} is not a positive number of seconds"
                )));
            }
        },
    };
    let mut b = side(&mut p, "b")?;
    // A reader scoped to tenants compares its own requests (counts, causes, GPU time).
    b.tenants = scope.narrow(b.tenants);
    if b.to_ns.is_none() {
        b.to_ns = Some(store.newest_arrival(&b).await?.map_or(0, |t| t + 1));
    }
    let b_to = b.to_ns.unwrap_or_default();
    let b_from = *b.from_ns.get_or_insert(b_to - span);
    ordered(&b, "b")?;
    let mut a = side(&mut p, "a")?;
    a.tenants = scope.narrow(a.tenants);
    // Two tenants (adapters, priorities) compare over the same time; otherwise A is before B.
    let same_time = a.from_ns.is_none()
        && a.to_ns.is_none()
        && (a.tenants != b.tenants
            || a.lora_adapter != b.lora_adapter
            || a.priority != b.priority
            || a.fingerprint != b.fingerprint);
    let a_to = *a.to_ns.get_or_insert(if same_time { b_to } else { b_from });
    a.from_ns.get_or_insert(a_to - (b_to - b_from));
    ordered(&a, "a")?;
    // The three reads are independent: run at once, they take the longest one's time (on two
    // cores, 0.9 s sequential against 0.5 s at 50,000 requests a side).
    let (answers, a, b) = tokio::try_join!(
        answers::answer_drift(&store, &a, &b),
        latency::compare_side(&store, &a, width, &th),
        latency::compare_side(&store, &b, width, &th),
    )?;
    let deltas = deltas(&a, &b);
    Ok(Json(Comparison {
        headline: headline(&a, &b, &deltas),
        a,
        b,
        deltas,
        answers,
    }))
}

fn ordered(s: &RequestFilter, name: &str) -> Result<()> {
    if s.from_ns >= s.to_ns {
        return Err(Error::InvalidArgument(format!(
            "{name}_from must be before {name}_to"
        )));
    }
    Ok(())
}

/// The `prefix_`ed parameters as a list filter, with the list's parsing and messages (which
/// name the parameter without its prefix, so they are re-worded here).
fn side(p: &mut HashMap<String, String>, prefix: &str) -> Result<RequestFilter> {
    let mut take = |name: &str| p.remove(&format!("{prefix}_{name}"));
    ListParams {
        instance: take("instance"),
        engine: take("engine"),
        engine_version: take("engine_version"),
        model: take("model"),
        tenant: take("tenant"),
        adapter: take("adapter"),
        priority: take("priority"),
        fingerprint: take("fingerprint"),
        from: take("from"),
        to: take("to"),
        ..ListParams::default()
    }
    .into_filter()
    .map_err(|e| match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{prefix}_{m}")),
        other => other,
    })
}
