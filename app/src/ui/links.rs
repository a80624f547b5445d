//! Links between the pages: a request's own page, and its moment in the waterfall.

use crate::model::Nanos;
use crate::ui::query::{build, encode};
use crate::ui::time::SECOND;

/// The waterfall around a request: some context before it and after it, the request selected.
pub fn waterfall_href(instance: &str, request_id: &str, arrival_ns: Nanos, e2e_ms: f64) -> String {
    let e2e = (e2e_ms * 1e6) as Nanos;
    let before = (e2e / 2).max(2 * SECOND);
    let after = (e2e / 4).max(SECOND);
    format!(
        "/waterfall{}",
        build(&[
            ("instance", instance.into()),
            ("from", (arrival_ns - before).to_string()),
            ("to", (arrival_ns + e2e + after).to_string()),
            ("focus", request_id.into()),
        ])
    )
}

pub fn request_href(instance: &str, request_id: &str) -> String {
    format!(
        "/requests/{}{}",
        encode(request_id),
        build(&[("instance", instance.into())])
    )
}
