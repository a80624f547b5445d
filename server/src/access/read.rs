//! Read access: who may see pages and the query API, and which incident links are public.
//!
//! Off unless configured. Two ways, either of which lets a reader in:
//! - a shared token (`--read-token`): API clients send `Authorization: Bearer <token>`; a browser
//!   signs in once at `/login` and then carries an HttpOnly cookie (the token's digest, never
//!   the token);
//! - a trusted reverse proxy (`--trusted-user-header X-Forwarded-User`) that authenticates users
//!   and names them in that header. Only safe when the proxy is the sole way to reach the HTTP
//!   port (bind it to loopback); `docs/ACCESS.md` has an example configuration.
//!
//! Readers can be scoped to tenants (`access::scope`): tokens from `--read-tokens` name theirs,
//! and with `--trusted-tenants-header` the proxy names each user's (`*` for all).
//!
//! With `--public-incidents`, an incident's page, Markdown and preview images are readable
//! without access (the 128-bit slug is the capability), so a link pasted into a ticket unfurls.
//! Health probes, `/metrics` (counts only, no text) and the browser's static files stay open;
//! trace ingest is guarded by ingest keys instead (`access::keys`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::scope::{ReadToken, Scope, page_allowed, scope_of, tenants_of};
use super::{Digest, MIN_SECRET_LEN, bearer, digest, same};
use crate::error::{Error, Result};

/// The cookie a signed-in browser carries: the hex digest of the token.
const COOKIE: &str = "tokenscope_read";

/// Who the gate let in (a request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reader {
    /// Read access is not configured: everyone reads.
    Open,
    /// Presented the shared token.
    Token,
    /// Named by the trusted proxy.
    User(String),
}

#[derive(Debug, Clone, Default)]
pub struct ReadAccess {
    token: Option<Digest>,
    /// Named tokens, each scoped to tenants or not (`--read-tokens`).
    tokens: Vec<ReadToken>,
    user_header: Option<HeaderName>,
    /// The header the proxy names a user's tenants in (`--trusted-tenants-header`).
    tenants_header: Option<HeaderName>,
    public_incidents: bool,
}

fn header_name(flag: &str, h: &str) -> Result<HeaderName> {
    HeaderName::try_from(h)
        .map_err(|_| Error::InvalidArgument(format!("{flag} {h:?} is not an HTTP header name")))
}

impl ReadAccess {
    /// Refuses a token too short to be safe, or a header name that is not one.
    pub fn new(
        token: Option<&str>,
        user_header: Option<&str>,
        public_incidents: bool,
    ) -> Result<Self> {
        if let Some(t) = token
            && t.len() < MIN_SECRET_LEN
        {
            return Err(Error::InvalidArgument(format!(
                "--read-token is {} characters; use at least {MIN_SECRET_LEN} (e.g. `openssl rand -hex 16`)",
                t.len()
            )));
        }
        let user_header = user_header
            .map(|h| header_name("--trusted-user-header", h))
            .transpose()?;
        Ok(Self {
            token: token.map(digest),
            tokens: Vec::new(),
            user_header,
            tenants_header: None,
            public_incidents,
        })
    }

    /// Adds named read tokens (`--read-tokens`) and the proxy's tenants header
    /// (`--trusted-tenants-header`, which needs `--trusted-user-header`).
    pub fn scoped(mut self, tokens: Vec<ReadToken>, tenants_header: Option<&str>) -> Result<Self> {
        if tenants_header.is_some() && self.user_header.is_none() {
            return Err(Error::InvalidArgument(
                "--trusted-tenants-header needs --trusted-user-header (the proxy names the user and their tenants)".into(),
            ));
        }
        self.tokens = tokens;
        self.tenants_header = tenants_header
            .map(|h| header_name("--trusted-tenants-header", h))
            .transpose()?;
        Ok(self)
    }

    /// Whether a request may see every tenant's data: read access is off, or it presents an
    /// unscoped credential. (`/metrics` is open to all; its exemplars name requests.)
    pub fn sees_everything(&self, headers: &HeaderMap) -> bool {
        !self.configured() || matches!(self.reader(headers), Some((_, Scope::All)))
    }

    fn configured(&self) -> bool {
        self.has_tokens() || self.user_header.is_some()
    }

    /// Whether a browser can sign in with a token.
    fn has_tokens(&self) -> bool {
        self.token.is_some() || !self.tokens.is_empty()
    }

    /// The scope of a presented token digest: the shared token sees all, a named one its own.
    fn token_scope(&self, presented: &Digest) -> Option<Scope> {
        // Every token is compared, so the time taken does not say which one matched.
        let mut found = None;
        if self.token.as_ref().is_some_and(|t| same(presented, t)) {
            found = Some(Scope::All);
        }
        for t in &self.tokens {
            if same(presented, &t.digest) && found.is_none() {
                found = Some(t.scope());
            }
        }
        found
    }

    /// The reader a request shows itself to be, if any, and what it may see.
    fn reader(&self, headers: &HeaderMap) -> Option<(Reader, Scope)> {
        if let Some(name) = &self.user_header
            && let Some(user) = headers.get(name).and_then(|v| v.to_str().ok())
            && !user.trim().is_empty()
        {
            let user = user.trim().to_string();
            // With a tenants header configured, a user the proxy names no tenants for sees none.
            let scope = match &self.tenants_header {
                None => Scope::All,
                Some(h) => {
                    let list = headers.get(h).and_then(|v| v.to_str().ok()).unwrap_or("");
                    scope_of(&user, tenants_of(list))
                }
            };
            return Some((Reader::User(user), scope));
        }
        let presented: Option<Digest> = bearer(headers).map(digest).or_else(|| {
            cookie(headers, COOKIE)
                .and_then(tokenscope_core::model::unhex)
                .and_then(|d| Digest::try_from(d).ok())
        });
        let scope = self.token_scope(&presented?)?;
        Some((Reader::Token, scope))
    }
}

/// Paths anyone may reach: probes, self-metrics, signing in, the browser's static files.
fn always_open(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | "/metrics" | "/login" | "/logout" | "/favicon.svg"
    ) || path.starts_with("/pkg/")
}

/// An incident's page, Markdown or preview image (reads only; the list stays private).
fn incident_link(method: &Method, path: &str) -> bool {
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    // What follows a non-empty slug ("" for the slug alone).
    fn after_slug(rest: &str) -> Option<&str> {
        let (slug, tail) = rest.split_once('/').unwrap_or((rest, ""));
        (!slug.is_empty()).then_some(tail)
    }
    if let Some(rest) = path.strip_prefix("/api/v1/incidents/") {
        return matches!(after_slug(rest), Some("" | "markdown"));
    }
    if let Some(rest) = path.strip_prefix("/incidents/") {
        return matches!(after_slug(rest), Some("" | "preview.png" | "preview.svg"));
    }
    false
}

/// The middleware in front of pages and the query API.
pub async fn gate(State(access): State<Arc<ReadAccess>>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if always_open(path) {
        return next.run(req).await;
    }
    if !access.configured() {
        req.extensions_mut().insert(Reader::Open);
        return next.run(req).await;
    }
    if let Some((reader, scope)) = access.reader(req.headers()) {
        if let Reader::User(user) = &reader {
            tracing::debug!(%user, "reader");
        }
        // Default deny for a scoped reader: the pages that show only what it may see (the API
        // has its own guard, which pages rendered on the server also pass).
        if let Scope::Tenants { tenants, .. } = &scope
            && !path.starts_with("/api/")
            && !page_allowed(path)
        {
            let message = format!(
                "a reader scoped to the tenants {} may not open {path}",
                tenants.join(", ")
            );
            return Error::Forbidden(message).into_response();
        }
        req.extensions_mut().insert(reader);
        req.extensions_mut().insert(scope);
        return next.run(req).await;
    }
    if access.public_incidents && incident_link(req.method(), path) {
        return next.run(req).await;
    }
    refuse(&access, &req)
}

fn refuse(access: &ReadAccess, req: &Request) -> Response {
    let wants_page = req.method() == Method::GET
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
    if wants_page && access.has_tokens() {
        let here = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let to = format!("/login?next={}", tokenscope_core::query::encode(here));
        return (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response();
    }
    let message = match (&access.token, &access.user_header) {
        (None, Some(h)) => format!(
            "reading needs access: this server takes the user from the {h} header set by its reverse proxy; reach it through the proxy"
        ),
        _ => {
            "reading needs access: sign in at /login, or send `Authorization: Bearer <read token>`"
                .to_string()
        }
    };
    Error::Unauthenticated(message).into_response()
}

/// A cookie's value from the `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Where to go after signing in: a path on this server, never another site.
fn local(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.starts_with("/\\") => n,
        _ => "/",
    }
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

#[derive(serde::Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// `GET /login`: the sign-in form.
pub async fn login_page(
    State(access): State<Arc<ReadAccess>>,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
) -> Response {
    login_html(&access, local(q.next.as_deref()), None)
}

/// `POST /login`: checks the token; sets the cookie and goes on, or shows the form again.
pub async fn login(
    State(access): State<Arc<ReadAccess>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let next = local(form.next.as_deref());
    if !access.has_tokens() {
        return login_html(&access, next, None);
    }
    let presented = digest(form.token.trim());
    if access.token_scope(&presented).is_none() {
        tracing::info!("sign-in refused: wrong read token");
        return login_html(
            &access,
            next,
            Some("That token is not this server's read token."),
        );
    }
    let https = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Lax; Max-Age=2592000{}",
        tokenscope_core::model::hex(&presented),
        if https { "; Secure" } else { "" }
    );
    let mut r = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, next.to_string())],
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `GET /logout`: forgets the cookie.
pub async fn logout() -> Response {
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/login".to_string()),
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0"),
            ),
        ],
    )
        .into_response()
}

fn login_html(access: &ReadAccess, next: &str, error: Option<&str>) -> Response {
    use tokenscope_core::html::escape;
    let body = if access.has_tokens() {
        let going = if next == "/" {
            String::new()
        } else {
            format!(" to open <code>{}</code>", escape(next))
        };
        format!(
            "<h1>Sign in to tokenscope</h1>\
             <p>This server keeps prompts and answers: sign in with its read token{going}.</p>\
             {}\
             <form method=\"post\" action=\"/login\">\
             <input type=\"hidden\" name=\"next\" value=\"{}\">\
             <label>Read token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" autofocus required></label>\
             <button type=\"submit\">Sign in</button></form>\
             <p class=\"muted\">The operator who runs tokenscope has the token (<code>--read-token</code>). \
             Scripts send it as <code>Authorization: Bearer &lt;token&gt;</code>.</p>",
            error
                .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e)))
                .unwrap_or_default(),
            escape(next)
        )
    } else {
        "<h1>No sign-in here</h1><p>This server has no read token; reach it the way your operator set up.</p>".into()
    };
    let status = if error.is_some() {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::OK
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        format!(
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign in · tokenscope</title>\
             <link rel=\"stylesheet\" href=\"/pkg/tokenscope.css\"></head><body><main><section class=\"panel login\">{body}</section></main></body></html>"
        ),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incident_links_are_the_page_markdown_and_previews_of_one_slug() {
        let get = Method::GET;
        assert!(incident_link(&get, "/incidents/abc"));
        assert!(incident_link(&get, "/incidents/abc/preview.png"));
        assert!(incident_link(&get, "/api/v1/incidents/abc"));
        assert!(incident_link(&get, "/api/v1/incidents/abc/markdown"));
        assert!(!incident_link(&get, "/incidents"));
        assert!(!incident_link(&get, "/incidents/"));
        assert!(!incident_link(&get, "/api/v1/incidents"));
        assert!(!incident_link(&get, "/api/v1/incidents/abc/other"));
        assert!(!incident_link(&Method::DELETE, "/api/v1/incidents/abc"));
    }

    #[test]
    fn sign_in_goes_on_only_to_a_path_of_this_server() {
        assert_eq!(local(Some("/requests/a?x=1")), "/requests/a?x=1");
        assert_eq!(local(Some("//evil.example/")), "/");
        assert_eq!(local(Some("/\\evil.example/")), "/");
        assert_eq!(local(Some("https://evil.example/")), "/");
        assert_eq!(local(None), "/");
    }

    #[test]
    fn the_cookie_carries_the_digest_and_is_read_back() {
        let access = ReadAccess::new(Some("0123456789abcdef"), None, false).unwrap();
        let mut h = HeaderMap::new();
        assert_eq!(access.reader(&h), None);
        let value = format!(
            "a=1; {COOKIE}={}",
            tokenscope_core::model::hex(&digest("0123456789abcdef"))
        );
        h.insert(header::COOKIE, value.parse().unwrap());
        assert_eq!(access.reader(&h), Some((Reader::Token, Scope::All)));
        h.insert(header::COOKIE, format!("{COOKIE}=00").parse().unwrap());
        assert_eq!(access.reader(&h), None);
        assert!(ReadAccess::new(Some("short"), None, false).is_err());
        assert!(ReadAccess::new(None, Some("bad header"), false).is_err());
    }
}
