//! Security headers on every reply of the HTTP port: pages carry a Content-Security-Policy with a
//! nonce, everything else a policy under which nothing runs; `nosniff`, `Referrer-Policy:
//! same-origin` (incident slugs never leave in a Referer) and `X-Frame-Options` on all of them.
//! The hand-written pages (sign-in, revoked) keep hostile text as text.

use crate::common;

use common::*;

const READ_TOKEN: &str = "read-00112233445566778899";

fn header<'a>(resp: &'a reqwest::Response, name: &str) -> &'a str {
    resp.headers()
        .get(name)
        .unwrap_or_else(|| panic!("{} has no {name}", resp.url()))
        .to_str()
        .unwrap()
}

#[test]
fn every_reply_carries_the_headers_and_only_pages_a_nonce() {
    on_server_stacks(async {
        let app = spawn_app().await;
        // A missing file is answered with the not-found page.
        let pages = [
            "/",
            "/waterfall",
            "/incidents",
            "/upload",
            "/no-such-page",
            "/pkg/none.js",
        ];
        let others = [
            "/api/v1/instances",
            "/api/v1/requests?limit=1",
            "/api/v1/requests/none",
            "/healthz",
            "/metrics",
        ];
        for path in pages.iter().chain(&others) {
            let resp = app.get(path).await;
            assert_eq!(header(&resp, "x-content-type-options"), "nosniff", "{path}");
            assert_eq!(header(&resp, "referrer-policy"), "same-origin", "{path}");
            assert_eq!(header(&resp, "x-frame-options"), "DENY", "{path}");
            let policy = header(&resp, "content-security-policy");
            assert!(
                policy.contains("frame-ancestors 'none'"),
                "{path}: {policy}"
            );
            let page = pages.contains(path);
            assert_eq!(policy.contains("'nonce-"), page, "{path}: {policy}");
            if !page {
                assert!(policy.starts_with("default-src 'none'"), "{path}: {policy}");
            }
        }
    })
}

#[tokio::test]
async fn the_sign_in_page_keeps_a_hostile_next_as_text() {
    let app = spawn_app_with(|c| c.access.read_token = Some(READ_TOKEN.into())).await;
    let next = "/x</title><script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    let resp = app
        .get(&format!(
            "/login?next={}",
            tokenscope_core::query::encode(next)
        ))
        .await;
    assert_eq!(resp.status(), 200);
    assert!(header(&resp, "content-security-policy").contains("script-src 'self' 'nonce-"));
    let html = resp.text().await.unwrap();
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(
        html.contains("&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img"),
        "{html}"
    );
}
