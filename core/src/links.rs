//! Links between the pages: a request's own page, and its moment in the waterfall; the origin a
//! viewer reached the server at (for absolute links in previews and tickets).

use crate::model::{Nanos, SECOND};
use crate::query::{build, encode};

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

/// How a reader scoped to tenants is shown another tenant's request (followed by a per-viewer
/// code): evidence without the id, so nothing to link to.
pub const ALIAS_PREFIX: &str = "another tenant's request ";

pub fn is_alias(request_id: &str) -> bool {
    request_id.starts_with(ALIAS_PREFIX)
}

pub fn request_href(instance: &str, request_id: &str) -> String {
    format!(
        "/requests/{}{}",
        encode(request_id),
        build(&[("instance", instance.into())])
    )
}

/// `scheme://host` as the client reached this server, from its request headers
/// (`X-Forwarded-Host`/`-Proto` behind a proxy, else `Host`); `None` without a usable host.
/// Header values that are empty or not plain visible ASCII are ignored.
pub fn origin(header: impl Fn(&str) -> Option<String>) -> Option<String> {
    let header =
        |n: &str| header(n).filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_graphic()));
    let host = header("x-forwarded-host").or_else(|| header("host"))?;
    let scheme = header("x-forwarded-proto")
        .filter(|s| s == "https" || s == "http")
        .unwrap_or_else(|| "http".into());
    Some(format!("{scheme}://{host}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_prefers_the_proxy_headers_and_ignores_odd_values() {
        let h = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| pairs.iter().find(|p| p.0 == n).map(|p| p.1.to_string())
        };
        assert_eq!(
            origin(h(&[("host", "a:3000")])).as_deref(),
            Some("http://a:3000")
        );
        assert_eq!(
            origin(h(&[
                ("host", "a"),
                ("x-forwarded-host", "b.example"),
                ("x-forwarded-proto", "https")
            ]))
            .as_deref(),
            Some("https://b.example")
        );
        assert_eq!(
            origin(h(&[("host", "a"), ("x-forwarded-proto", "gopher")])).as_deref(),
            Some("http://a")
        );
        assert_eq!(origin(h(&[("host", "a b")])), None);
        assert_eq!(origin(h(&[])), None);
    }
}
