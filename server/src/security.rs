//! Security headers on every HTTP response: a Content-Security-Policy (on pages, with a fresh
//! nonce per response that the hydration scripts carry), `nosniff`, `Referrer-Policy` and
//! `X-Frame-Options`.
//!
//! Escaping keeps untrusted text (request ids, token texts, incident titles) out of the markup;
//! the policy is the second wall: should an escape be missed somewhere, the browser still refuses
//! an injected inline script or event handler, because only scripts from this origin and inline
//! scripts carrying the response's nonce run. Incident slugs are capabilities, so the Referer
//! header never carries a page's address to another site.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use leptos::nonce::Nonce;

/// The policy of an HTML page with this response's nonce.
///
/// - `script-src`: our own files, the inline scripts Leptos writes (hydration, resolved
///   resources) with the nonce, and compiling the app's WebAssembly (`'wasm-unsafe-eval'`; no
///   JavaScript `eval`). No `'unsafe-inline'`, so inline event handlers never run.
/// - `style-src 'unsafe-inline'`: bars and panels are positioned with `style` attributes; a style
///   cannot run code.
/// - `img-src data: blob:`: the canvases' exports and the link previews are images of our own.
/// - `frame-ancestors 'none'`: no page is embedded in another site's frame (clickjacking of
///   "revoke link"); an incident is shared as a link that unfurls, not as a frame.
pub fn page_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; \
         font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

/// The policy of everything that is not a page (JSON, CSV, Markdown, SVG and PNG previews,
/// static files): should a browser open one as a document (an SVG, say), nothing in it runs.
const OTHER_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The policy of our scripts. A page's own policy governs the scripts it loads, but a worker
/// runs under the policy its script came with: the live stream's shared worker
/// (`public/live-worker.js`) may connect to this origin and do nothing else.
const SCRIPT_POLICY: &str = "default-src 'none'; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The middleware, outermost on the HTTP port: gives the request a nonce (a request extension
/// the page renderer hands to Leptos, see `server::page_context`) and sets the headers on the
/// response, whichever handler made it (pages, the revoked page, sign-in, errors).
pub async fn headers(mut req: Request, next: Next) -> Response {
    let nonce = Nonce::new();
    req.extensions_mut().insert(nonce.clone());
    let mut resp = next.run(req).await;
    let policy = policy_for(content_type(resp.headers()), &nonce);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&policy) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

/// The policy of a reply of this content type.
fn policy_for(content_type: &str, nonce: &str) -> String {
    match content_type {
        t if t.starts_with("text/html") => page_policy(nonce),
        t if t.starts_with("text/javascript") || t.starts_with("application/javascript") => {
            SCRIPT_POLICY.to_string()
        }
        _ => OTHER_POLICY.to_string(),
    }
}

fn content_type(h: &HeaderMap) -> &str {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map_or("", str::trim_start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_policy_allows_only_own_scripts_and_the_nonce() {
        let p = page_policy("abc");
        assert!(p.contains("script-src 'self' 'nonce-abc' 'wasm-unsafe-eval';"));
        for directive in [
            "object-src 'none'",
            "base-uri 'none'",
            "frame-ancestors 'none'",
        ] {
            assert!(p.contains(directive), "{directive}");
        }
        let script = p.split(';').find(|d| d.contains("script-src")).unwrap();
        assert!(!script.contains("unsafe-inline"), "{script}");
        assert!(!script.contains("'unsafe-eval'"), "{script}");
    }

    #[test]
    fn a_script_may_connect_home_and_nothing_else_may_run_anything() {
        // The live worker's policy: its stream, and no scripts, frames or forms.
        let worker = policy_for("text/javascript; charset=utf-8", "n");
        assert!(
            worker.starts_with("default-src 'none'; connect-src 'self';"),
            "{worker}"
        );
        assert!(!worker.contains("script-src"), "{worker}");
        assert_eq!(policy_for("application/javascript", "n"), worker);
        for other in ["application/json", "image/svg+xml", "text/plain", ""] {
            let p = policy_for(other, "n");
            assert!(
                p.starts_with("default-src 'none'") && !p.contains("connect-src"),
                "{other}: {p}"
            );
        }
        assert!(policy_for("text/html; charset=utf-8", "n").contains("'nonce-n'"));
    }
}
