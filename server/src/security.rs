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

/// The middleware, outermost on the HTTP port: gives the request a nonce (a request extension
/// the page renderer hands to Leptos, see `server::page_context`) and sets the headers on the
/// response, whichever handler made it (pages, the revoked page, sign-in, errors).
pub async fn headers(mut req: Request, next: Next) -> Response {
    let nonce = Nonce::new();
    req.extensions_mut().insert(nonce.clone());
    let mut resp = next.run(req).await;
    let policy = if is_html(resp.headers()) {
        page_policy(&nonce)
    } else {
        OTHER_POLICY.to_string()
    };
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

fn is_html(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.trim_start().starts_with("text/html"))
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
}
