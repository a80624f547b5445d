//! Readers scoped to tenants: a read token from `--read-tokens`, or a user whose tenants the
//! trusted proxy names, sees only its tenants' requests. Another tenant's request that is
//! evidence (a culprit, a request that prefilled meanwhile) appears under an opaque alias that
//! is stable for the viewer ("another tenant's request 3f9a1c"), never by its id.
//!
//! Default deny: a scoped reader reaches only the routes listed here ([`page_allowed`],
//! [`api_allowed`]), each of which narrows its data to the reader's tenants (lists, charts, GPU
//! time), checks the one request it shows, or (the waterfall) shows other tenants' tracks under
//! their aliases, and rewrites the ids of other tenants' requests in every byte of its reply
//! ([`Redactor`]). A route added later stays closed to scoped readers
//! until it does the same.

use std::collections::HashMap;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, MatchKind};
use axum::extract::{FromRequestParts, Request};
use axum::http::{Method, request::Parts};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Digest, MIN_SECRET_LEN, digest};
use crate::error::{Error, Result};
use crate::store::{Loaded, Store};

/// What a reader may see (a request extension set by the read gate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Everything (read access off, the shared token, an unscoped token or user).
    #[default]
    All,
    /// Only these tenants' requests; `viewer` names the reader (aliases are per viewer).
    Tenants {
        viewer: String,
        tenants: Vec<String>,
    },
}

/// One line of the read tokens file.
#[derive(Clone, Debug)]
pub struct ReadToken {
    pub name: String,
    pub digest: Digest,
    /// `None`: every tenant (`*`).
    pub tenants: Option<Vec<String>>,
}

impl ReadToken {
    pub fn scope(&self) -> Scope {
        scope_of(&self.name, self.tenants.clone())
    }
}

/// The scope of a reader named `viewer` allowed `tenants` (`None`: all).
pub fn scope_of(viewer: &str, tenants: Option<Vec<String>>) -> Scope {
    match tenants {
        None => Scope::All,
        Some(tenants) => Scope::Tenants {
            viewer: viewer.to_string(),
            tenants,
        },
    }
}

/// A comma-separated tenant list as a file or proxy header gives it: `*` is every tenant.
pub fn tenants_of(list: &str) -> Option<Vec<String>> {
    let tenants = crate::store::split_list(list);
    (!tenants.iter().any(|t| t == "*")).then_some(tenants)
}

/// Parses `--read-tokens`: `<name> <token> <tenants>` per line, `#` comments.
pub fn parse_read_tokens(text: &str) -> Result<Vec<ReadToken>> {
    let mut out: Vec<ReadToken> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, token, tenants] = fields[..] else {
            return Err(Error::InvalidArgument(format!(
                "read tokens line {}: expected `<name> <token> <tenants>` (tenants comma-separated, `*` for all), got {} fields",
                n + 1,
                fields.len()
            )));
        };
        if token.len() < MIN_SECRET_LEN {
            return Err(Error::InvalidArgument(format!(
                "read tokens line {} ({name}): the token is {} characters; use at least {MIN_SECRET_LEN}",
                n + 1,
                token.len()
            )));
        }
        if out.iter().any(|t| t.name == name) {
            return Err(Error::InvalidArgument(format!(
                "read tokens line {}: the name {name:?} is used twice",
                n + 1
            )));
        }
        out.push(ReadToken {
            name: name.to_string(),
            digest: digest(token),
            tenants: tenants_of(tenants),
        });
    }
    Ok(out)
}

impl Scope {
    /// The tenants a scoped reader may see.
    pub fn tenants(&self) -> Option<&[String]> {
        match self {
            Scope::All => None,
            Scope::Tenants { tenants, .. } => Some(tenants),
        }
    }

    /// The tenants a filter keeps: those asked for that the reader may see (none, when it asks
    /// only for others), or all the reader's when it asks for none.
    pub fn narrow(&self, asked: Option<Vec<String>>) -> Option<Vec<String>> {
        match (self.tenants(), asked) {
            (None, asked) => asked,
            (Some(mine), None) => Some(mine.to_vec()),
            (Some(mine), Some(asked)) => {
                Some(asked.into_iter().filter(|t| mine.contains(t)).collect())
            }
        }
    }

    pub fn sees(&self, tenant: Option<&str>) -> bool {
        match self.tenants() {
            None => true,
            Some(mine) => tenant.is_some_and(|t| mine.iter().any(|m| m == t)),
        }
    }

    /// The viewer's name for another tenant's request: the same request gets the same alias for
    /// this viewer (on every server of the database, across restarts), another viewer gets
    /// another.
    pub fn alias(&self, request_id: &str) -> String {
        let viewer = match self {
            Scope::All => "",
            Scope::Tenants { viewer, .. } => viewer,
        };
        let d = digest(&format!("{}\0{viewer}\0{request_id}", salt()));
        format!(
            "{}{}",
            tokenscope_core::links::ALIAS_PREFIX,
            tokenscope_core::model::hex(&d[..3])
        )
    }

    /// Checks that the reader may see this request (a request it may not see is "not found",
    /// as one that does not exist), and returns what rewrites the other tenants' requests that
    /// lived at the same time on its instances.
    pub async fn request(&self, store: &Store, l: &Loaded) -> Result<Redactor> {
        Ok(self.request_ids(store, l).await?.redactor(self))
    }

    /// [`Scope::request`]'s check, and the reader's and the others' requests around it.
    pub async fn request_ids(&self, store: &Store, l: &Loaded) -> Result<Ids> {
        let Scope::Tenants { .. } = self else {
            return Ok(Ids::default());
        };
        if !self.sees(l.trace.served.tenant.as_deref()) {
            return Err(Error::NotFound(format!(
                "no request {:?}",
                l.trace.request_id
            )));
        }
        let parts: Vec<&Loaded> = if l.parts.is_empty() {
            vec![l]
        } else {
            l.parts.iter().collect()
        };
        let (mut mine, mut theirs) = (vec![l.trace.request_id.clone()], Vec::new());
        for p in parts {
            let t = &p.trace;
            for (id, tenant) in store
                .tenants_alive(p.instance_id, t.arrival_ns, t.finished_ns)
                .await?
            {
                if self.sees(tenant.as_deref()) {
                    mine.push(id);
                } else {
                    theirs.push(id);
                }
            }
        }
        Ok(Ids { mine, theirs })
    }
}

impl Scope {
    /// What rewrites a listing of diagnoses (already narrowed to the reader's tenants): every
    /// request its findings name (culprits, and ids in their evidence) that the reader may not
    /// see, or that is not found on `instances`, becomes its alias.
    pub async fn diagnoses(
        &self,
        store: &Store,
        instances: Option<&[i32]>,
        list: &[tokenscope_core::analysis::diagnosis::Diagnosis],
    ) -> Result<Redactor> {
        let Scope::Tenants { .. } = self else {
            return Ok(Redactor::default());
        };
        let mut named: Vec<String> = Vec::new();
        for f in list.iter().flat_map(|d| &d.findings) {
            named.extend(f.culprits.iter().cloned());
            ids_in(&f.evidence, &mut named);
        }
        named.sort();
        named.dedup();
        let mut tenants: HashMap<String, Vec<Option<String>>> = HashMap::new();
        for (id, tenant) in store.tenants_of(instances, &named).await? {
            tenants.entry(id).or_default().push(tenant);
        }
        // An id the reader may not see on every row it has (or not found at all) is another's.
        let (mut mine, mut theirs): (Vec<String>, Vec<String>) =
            named.into_iter().partition(|id| {
                tenants
                    .get(id)
                    .is_some_and(|ts| ts.iter().all(|t| self.sees(t.as_deref())))
            });
        mine.extend(list.iter().map(|d| d.request_id.clone()));
        theirs.retain(|id| !mine.contains(id));
        Ok(Ids { mine, theirs }.redactor(self))
    }
}

impl Scope {
    /// What rewrites prompt families (already narrowed to the reader's tenants): the requests
    /// an eviction's pressure names (any tenant's on that instance) that the reader may not see
    /// become their aliases.
    pub async fn fingerprints(
        &self,
        store: &Store,
        fp: &tokenscope_core::api::Fingerprints,
    ) -> Result<Redactor> {
        use tokenscope_core::api::MissWhy;
        let Scope::Tenants { .. } = self else {
            return Ok(Redactor::default());
        };
        let mut mine: Vec<String> = Vec::new();
        let mut named: Vec<String> = Vec::new();
        for m in fp.families.iter().flat_map(|f| &f.misses) {
            mine.push(m.request_id.clone());
            match &m.why {
                MissWhy::InFlight { earlier } => mine.push(earlier.clone()),
                MissWhy::Evicted { last_by, since, .. } => {
                    mine.push(last_by.clone());
                    named.extend(since.iter().flat_map(|p| p.top.iter().map(|t| t.0.clone())));
                }
                MissWhy::ColdInstance { .. } => {}
            }
        }
        named.sort();
        named.dedup();
        let mut tenants: HashMap<String, Vec<Option<String>>> = HashMap::new();
        for (id, tenant) in store.tenants_of(None, &named).await? {
            tenants.entry(id).or_default().push(tenant);
        }
        let (seen, mut theirs): (Vec<String>, Vec<String>) = named.into_iter().partition(|id| {
            tenants
                .get(id)
                .is_some_and(|ts| ts.iter().all(|t| self.sees(t.as_deref())))
        });
        mine.extend(seen);
        theirs.retain(|id| !mine.contains(id));
        Ok(Ids { mine, theirs }.redactor(self))
    }
}

/// The values of every `request_id` key in a finding's evidence.
fn ids_in(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("request_id", serde_json::Value::String(id)) => out.push(id.clone()),
                    _ => ids_in(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| ids_in(v, out)),
        _ => {}
    }
}

/// Request ids a reply may mention: the reader's, and other tenants' (to alias).
#[derive(Debug, Default)]
pub struct Ids {
    mine: Vec<String>,
    theirs: Vec<String>,
}

impl Ids {
    pub fn extend(&mut self, other: Ids) {
        self.mine.extend(other.mine);
        self.theirs.extend(other.theirs);
    }

    pub fn redactor(&self, scope: &Scope) -> Redactor {
        Redactor::new(scope, &self.mine, &self.theirs)
    }
}

impl Scope {
    /// A waterfall as this reader may see it: another tenant's track keeps its timing, phases
    /// and sizes (what it did to the reader's requests) under its alias, without its tenant,
    /// adapter or priority; its id is rewritten wherever else it occurs.
    pub async fn waterfall(
        &self,
        store: &Store,
        instances: &[String],
        w: &mut tokenscope_core::analysis::waterfall::Waterfall,
    ) -> Result<Redactor> {
        Ok(self
            .waterfall_ids(store, instances, w)
            .await?
            .redactor(self))
    }

    /// [`Scope::waterfall`]'s rewrite of the tracks, and the requests the rest may mention.
    pub async fn waterfall_ids(
        &self,
        store: &Store,
        instances: &[String],
        w: &mut tokenscope_core::analysis::waterfall::Waterfall,
    ) -> Result<Ids> {
        let Scope::Tenants { .. } = self else {
            return Ok(Ids::default());
        };
        let set = store.resolve_instances(instances).await?;
        let mut tenant_of: HashMap<String, Option<String>> = HashMap::new();
        for id in &set.ids {
            tenant_of.extend(store.tenants_alive(*id, w.from_ns, w.to_ns).await?);
        }
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for (id, tenant) in &tenant_of {
            if self.sees(tenant.as_deref()) {
                mine.push(id.clone());
            } else {
                theirs.push(id.clone());
            }
        }
        for t in &mut w.tracks {
            // A track not found among the window's requests is not shown as the reader's.
            let tenant = tenant_of.get(&t.request_id).cloned().flatten();
            if !self.sees(tenant.as_deref()) {
                if !tenant_of.contains_key(&t.request_id) {
                    theirs.push(t.request_id.clone());
                }
                t.request_id = self.alias(&t.request_id);
                t.tenant = None;
                t.lora_adapter = None;
                t.priority = None;
            }
        }
        Ok(Ids { mine, theirs })
    }
}

static SALT: OnceLock<String> = OnceLock::new();

/// Sets the salt aliases are digested with: the database's (`Store::alias_salt`), so that every
/// server on one database, and the next run, give a viewer the same aliases. The first call wins.
pub fn use_salt(salt: String) {
    let _ = SALT.set(salt);
}

/// The salt: aliases cannot be computed from ids by anyone without it. A random one when the
/// server did not set the database's (unit tests).
fn salt() -> &'static str {
    SALT.get_or_init(|| {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).expect("the OS has randomness");
        tokenscope_core::model::hex(&b)
    })
}

/// Rewrites other tenants' request ids to their aliases wherever they occur in a reply (JSON,
/// CSV, sentences), in the forms those formats write them. The reader's own ids are patterns
/// too, kept as they are, so that an own id containing another's (`kv-06`, `kv-0`) stays whole.
#[derive(Default)]
pub struct Redactor {
    matcher: Option<(AhoCorasick, Vec<Option<String>>)>,
}

impl Redactor {
    fn new(scope: &Scope, mine: &[String], theirs: &[String]) -> Self {
        if theirs.is_empty() {
            return Self::default();
        }
        let mut patterns: HashMap<String, Option<String>> = HashMap::new();
        for id in theirs {
            let alias = scope.alias(id);
            for form in forms(id) {
                patterns.insert(form, Some(alias.clone()));
            }
        }
        for id in mine {
            for form in forms(id) {
                patterns.insert(form, None);
            }
        }
        patterns.retain(|p, _| !p.is_empty());
        let (keys, values): (Vec<String>, Vec<Option<String>>) = patterns.into_iter().unzip();
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&keys)
            .ok();
        Self {
            matcher: matcher.map(|m| (m, values)),
        }
    }

    pub fn apply(&self, text: &str) -> String {
        let Some((m, values)) = &self.matcher else {
            return text.to_string();
        };
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for hit in m.find_iter(text) {
            out.push_str(&text[at..hit.start()]);
            match &values[hit.pattern().as_usize()] {
                Some(alias) => out.push_str(alias),
                None => out.push_str(&text[hit.start()..hit.end()]),
            }
            at = hit.end();
        }
        out.push_str(&text[at..]);
        out
    }

    /// A JSON reply with the ids rewritten.
    pub fn json<T: serde::Serialize>(&self, value: &T) -> Result<Response> {
        let body = serde_json::to_string(value)
            .map_err(|e| Error::Internal(format!("a reply does not serialise: {e}")))?;
        Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                "application/json".to_string(),
            )],
            self.apply(&body),
        )
            .into_response())
    }
}

/// An id as text, as a JSON string holds it, and as a CSV cell quotes it.
fn forms(id: &str) -> Vec<String> {
    let json = serde_json::to_string(id).unwrap_or_default();
    let json = json[1..json.len().saturating_sub(1).max(1)].to_string();
    vec![id.to_string(), json, id.replace('"', "\"\"")]
}

impl<S: Send + Sync> FromRequestParts<S> for Scope {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> std::result::Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Scope>().cloned().unwrap_or_default())
    }
}

/// Pages a scoped reader may open: the explorer, the waterfall, request pages, compare, GPU time
/// and incidents (those made within its tenants).
pub fn page_allowed(path: &str) -> bool {
    matches!(
        path,
        "/" | "/usage" | "/waterfall" | "/incidents" | "/compare"
    ) || path.starts_with("/requests/")
        || path.starts_with("/incidents/")
}

/// Query API routes a scoped reader may call (GET): those that narrow to its tenants or check
/// the request they show.
pub fn api_allowed(method: &Method, path: &str) -> bool {
    // Making an incident: only of the reader's own requests, others' aliased (`api::incidents`).
    if method == Method::POST && path == "/api/v1/incidents" {
        return true;
    }
    if method != Method::GET && method != Method::HEAD {
        return false;
    }
    // Incidents made within the reader's tenants: the list, each one, its Markdown and preview.
    if path == "/api/v1/incidents" {
        return true;
    }
    if let Some(rest) = path
        .strip_prefix("/api/v1/incidents/")
        .or_else(|| path.strip_prefix("/incidents/"))
    {
        let (slug, tail) = rest.split_once('/').unwrap_or((rest, ""));
        return !slug.is_empty() && matches!(tail, "" | "markdown" | "preview.png" | "preview.svg");
    }
    if matches!(
        path,
        "/api/v1/requests"
            | "/api/v1/diagnosis"
            | "/api/v1/slow-set"
            | "/api/v1/fingerprints"
            | "/api/v1/latency"
            | "/api/v1/usage"
            | "/api/v1/instances"
            | "/api/v1/waterfall"
            | "/api/v1/live"
            | "/api/v1/me"
            | "/api/v1/compare"
    ) {
        return true;
    }
    let Some(rest) = path.strip_prefix("/api/v1/requests/") else {
        return false;
    };
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    !id.is_empty()
        && matches!(
            tail,
            "" | "diagnosis" | "victims" | "tokens.csv" | "trace.json"
        )
}

/// The query API's guard: a scoped reader is refused every route not in [`api_allowed`]
/// (also when a page rendered on the server asks in process).
pub async fn guard(scope: Scope, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if let Scope::Tenants { tenants, .. } = &scope
        && !api_allowed(req.method(), path)
        && !matches!(path, "/healthz" | "/readyz")
    {
        return Error::Forbidden(format!(
            "a reader scoped to the tenants {} may not use {} {}",
            tenants.join(", "),
            req.method(),
            req.uri().path()
        ))
        .into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acme() -> Scope {
        scope_of("acme-reader", Some(vec!["acme".into()]))
    }

    #[test]
    fn the_file_names_tokens_and_their_tenants() {
        let t = parse_read_tokens(
            "# who\nacme-reader 0123456789abcdef0 acme\nsre 0123456789abcdef1 *\nboth 0123456789abcdef2 acme,globex\n",
        );
        let t = t.unwrap();
        assert_eq!(t[0].scope(), acme());
        assert_eq!(t[1].scope(), Scope::All);
        assert_eq!(t[2].tenants, Some(vec!["acme".into(), "globex".into()]));
        let e = parse_read_tokens("x 0123456789abcdef0 acme, globex\n").unwrap_err();
        assert!(e.to_string().contains("got 4 fields"), "{e}");
        let e = parse_read_tokens("x 0123456789abcdef0 acme\nx 0123456789abcdef1 b\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = parse_read_tokens("x short acme\n").unwrap_err();
        assert!(e.to_string().contains("at least 16"), "{e}");
    }

    #[test]
    fn filters_narrow_to_the_readers_tenants() {
        let s = acme();
        assert_eq!(s.narrow(None), Some(vec!["acme".to_string()]));
        assert_eq!(
            s.narrow(Some(vec!["globex".into(), "acme".into()])),
            Some(vec!["acme".to_string()])
        );
        assert_eq!(s.narrow(Some(vec!["globex".into()])), Some(vec![]));
        assert_eq!(Scope::All.narrow(None), None);
        assert!(s.sees(Some("acme")) && !s.sees(Some("globex")) && !s.sees(None));
    }

    #[test]
    fn other_tenants_ids_become_aliases_in_every_form_and_own_ids_stay_whole() {
        let s = acme();
        let theirs = ["kv-0".to_string(), "q\"uote".to_string()];
        let r = Redactor::new(&s, &["kv-06".into()], &theirs);
        let a = s.alias("kv-0");
        assert!(a.starts_with("another tenant's request "));
        assert_eq!(a, s.alias("kv-0"), "stable for the viewer");
        assert_ne!(
            a,
            scope_of("other", Some(vec![])).alias("kv-0"),
            "per viewer"
        );
        assert_eq!(
            r.apply("kv-06 waited behind kv-0."),
            format!("kv-06 waited behind {a}.")
        );
        let json = serde_json::to_string(&["q\"uote"]).unwrap();
        assert!(!r.apply(&json).contains("uote"), "{}", r.apply(&json));
        assert!(!r.apply("\"q\"\"uote\",1").contains("uote"));
    }

    #[test]
    fn scoped_readers_reach_only_the_routes_that_narrow() {
        let get = Method::GET;
        assert!(api_allowed(&get, "/api/v1/requests"));
        assert!(api_allowed(&get, "/api/v1/requests/abc/diagnosis"));
        assert!(api_allowed(&get, "/api/v1/requests/abc/tokens.csv"));
        assert!(api_allowed(&get, "/api/v1/waterfall"));
        assert!(api_allowed(&get, "/api/v1/diagnosis"));
        for path in [
            "/api/v1/alerts/alertmanager",
            "/api/v1/requests/abc/other",
            "/api/v1/requests//diagnosis",
        ] {
            assert!(!api_allowed(&get, path), "{path}");
        }
        assert!(!api_allowed(&Method::POST, "/api/v1/requests"));
        assert!(api_allowed(&Method::POST, "/api/v1/incidents"));
        assert!(api_allowed(&get, "/api/v1/incidents/abc/markdown"));
        assert!(api_allowed(&get, "/incidents/abc/preview.png"));
        assert!(!api_allowed(&Method::DELETE, "/api/v1/incidents/abc"));
        assert!(page_allowed("/requests/abc") && page_allowed("/usage") && page_allowed("/"));
        assert!(!page_allowed("/upload") && !page_allowed("/explore") && page_allowed("/compare"));
    }
}
