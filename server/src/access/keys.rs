//! Ingest keys: who may send traces, and for which instances.
//!
//! The operator lists keys in a file (`--ingest-keys FILE`), one per line:
//!
//! ```text
//! # name      key                                instances
//! vllm-prod   9c1d4e0f6a2b47d8a51e3c7b20f9d6e4   vllm-prod-*,vllm-canary
//! ops         0e7f2a9b4c1d48e6b3a5f7c9d2e4a6b8   *
//! ```
//!
//! Instances are exact ids, prefixes ending in `*`, or `*` for all. A sender presents its key as
//! `Authorization: Bearer <key>` (HTTP header or gRPC metadata; OTLP exporters send it with
//! `OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<key>`). [`KeyLayer`] refuses a request
//! without a valid key before its body is read (401 / `UNAUTHENTICATED`) and hands the key's
//! [`Grant`] to the handler, which refuses, item by item, what the key may not send for.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, Request, Response, header};
use tower::{Layer, Service};

use super::{Digest, MIN_SECRET_LEN, Reader, bearer, digest, same};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use tokenscope_core::model::validate::FieldError;

/// Instances a key may send for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    All,
    Exact(String),
    Prefix(String),
}

impl Pattern {
    fn parse(s: &str) -> Self {
        match s.strip_suffix('*') {
            Some("") => Pattern::All,
            Some(prefix) => Pattern::Prefix(prefix.to_string()),
            None => Pattern::Exact(s.to_string()),
        }
    }

    fn matches(&self, instance: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Exact(id) => id == instance,
            Pattern::Prefix(p) => instance.starts_with(p.as_str()),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pattern::All => f.write_str("*"),
            Pattern::Exact(id) => f.write_str(id),
            Pattern::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

struct Key {
    name: Arc<str>,
    digest: Digest,
    instances: Arc<[Pattern]>,
}

/// The configured keys.
pub struct IngestKeys {
    keys: Vec<Key>,
}

impl IngestKeys {
    /// Reads a key file; an error names the file and the line that is wrong.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::InvalidArgument(format!("cannot read ingest keys {}: {e}", path.display()))
        })?;
        Self::parse(&text)
            .map_err(|e| Error::InvalidArgument(format!("ingest keys {}: {e}", path.display())))
    }

    /// Parses the key file's text (see the module's documentation). The error names the line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys: Vec<Key> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("line {}", i + 1);
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, key, instances] = fields[..] else {
                return Err(format!(
                    "{at}: expected \"<name> <key> <instances>\", found {} fields",
                    fields.len()
                ));
            };
            if key.len() < MIN_SECRET_LEN {
                return Err(format!(
                    "{at}: the key of {name:?} is {} characters; use at least {MIN_SECRET_LEN} (e.g. `openssl rand -hex 16`)",
                    key.len()
                ));
            }
            let digest = digest(key);
            if let Some(other) = keys.iter().find(|k| k.name.as_ref() == name) {
                return Err(format!("{at}: the name {:?} is used twice", other.name));
            }
            if keys.iter().any(|k| same(&k.digest, &digest)) {
                return Err(format!(
                    "{at}: the key of {name:?} is also another name's key"
                ));
            }
            let instances: Vec<Pattern> = instances
                .split(',')
                .filter(|s| !s.is_empty())
                .map(Pattern::parse)
                .collect();
            if instances.is_empty() {
                return Err(format!("{at}: {name:?} names no instance (use * for all)"));
            }
            keys.push(Key {
                name: name.into(),
                digest,
                instances: instances.into(),
            });
        }
        if keys.is_empty() {
            return Err("no keys: every ingest would be refused".into());
        }
        Ok(Self { keys })
    }

    /// The grant of a presented key, if it is one of ours. Every key is compared, whichever
    /// matches, so the time taken does not tell which (or whether one) did.
    pub fn grant(&self, presented: &str) -> Option<Grant> {
        let presented = digest(presented);
        let mut found = None;
        for k in &self.keys {
            if same(&k.digest, &presented) {
                found = Some(k);
            }
        }
        found.map(|k| Grant::Key {
            name: k.name.clone(),
            instances: k.instances.clone(),
        })
    }
}

/// What a request may store: any instance (no keys configured, or the server's own work), or
/// the instances of the key it presented.
#[derive(Debug, Clone)]
pub enum Grant {
    All,
    Key {
        name: Arc<str>,
        instances: Arc<[Pattern]>,
    },
}

impl Grant {
    pub fn allows(&self, instance: &str) -> bool {
        match self {
            Grant::All => true,
            Grant::Key { instances, .. } => instances.iter().any(|p| p.matches(instance)),
        }
    }

    /// Why an item of `instance` is refused, naming the key (never the key itself).
    pub fn refusal(&self, instance: &str) -> FieldError {
        let (name, allowed) = match self {
            Grant::All => ("", String::new()),
            Grant::Key { name, instances } => (
                name.as_ref(),
                instances
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        };
        FieldError::new(
            "resource.instance_id",
            format!(
                "ingest key {name:?} may not send for instance {instance:?} (it may for: {allowed})"
            ),
        )
    }
}

/// When a request without a valid key is let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fallback {
    /// Never (trace ingest).
    Refuse,
    /// When the read gate knew the sender (`POST /api/v1/import`: an upload from the browser).
    KnownReader,
}

/// Checks the key of each request (when keys are configured) and hands its [`Grant`] on as a
/// request extension. Without keys configured every request gets [`Grant::All`].
#[derive(Clone)]
pub struct KeyLayer {
    keys: Option<Arc<IngestKeys>>,
    fallback: Fallback,
    /// Where refusals are counted.
    metrics: Arc<Metrics>,
}

impl KeyLayer {
    /// For trace ingest: a valid key, or refused.
    pub fn required(keys: Option<Arc<IngestKeys>>, metrics: Arc<Metrics>) -> Self {
        Self {
            keys,
            fallback: Fallback::Refuse,
            metrics,
        }
    }

    /// For imports: a valid key, or a reader the read gate let in.
    pub fn or_known_reader(keys: Option<Arc<IngestKeys>>, metrics: Arc<Metrics>) -> Self {
        Self {
            keys,
            fallback: Fallback::KnownReader,
            metrics,
        }
    }

    fn grant<B>(&self, req: &Request<B>) -> Result<Grant, &'static str> {
        let Some(keys) = &self.keys else {
            return Ok(Grant::All);
        };
        let presented = bearer(req.headers());
        if let Some(grant) = presented.and_then(|k| keys.grant(k)) {
            return Ok(grant);
        }
        let known_reader = matches!(
            req.extensions().get::<Reader>(),
            Some(Reader::Token | Reader::User(_))
        );
        if self.fallback == Fallback::KnownReader && known_reader {
            return Ok(Grant::All);
        }
        Err(match presented {
            None => {
                "ingest needs a key: send `Authorization: Bearer <key>` with a key from the server's --ingest-keys file"
            }
            Some(_) => "the ingest key is not valid",
        })
    }
}

impl<S> Layer<S> for KeyLayer {
    type Service = WithKey<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WithKey {
            inner,
            layer: self.clone(),
        }
    }
}

/// How a port says "who are you?".
pub trait Unauthenticated: Sized {
    fn unauthenticated(message: &str) -> Response<Self>;
}

impl Unauthenticated for axum::body::Body {
    fn unauthenticated(message: &str) -> Response<Self> {
        use axum::response::IntoResponse;
        let mut r = Error::Unauthenticated(message.into()).into_response();
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        r
    }
}

impl Unauthenticated for tonic::body::Body {
    fn unauthenticated(message: &str) -> Response<Self> {
        tonic::Status::from(Error::Unauthenticated(message.into())).into_http()
    }
}

#[derive(Clone)]
pub struct WithKey<S> {
    inner: S,
    layer: KeyLayer,
}

impl<S, B, RB> Service<Request<B>> for WithKey<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Unauthenticated + Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        match self.layer.grant(&req) {
            Ok(grant) => {
                req.extensions_mut().insert(grant);
                Box::pin(self.inner.call(req))
            }
            Err(message) => {
                self.layer.metrics.unauthenticated();
                tracing::info!(path = %req.uri().path(), "ingest refused: {message}");
                let refusal = RB::unauthenticated(message);
                Box::pin(async move { Ok(refusal) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# name key instances\n\
        prod  0123456789abcdef0123  vllm-prod-*,vllm-canary\n\
        \n\
        ops   fedcba9876543210fedc  *\n";

    #[test]
    fn a_key_grants_its_instances_and_no_others() {
        let keys = IngestKeys::parse(FILE).unwrap();
        let prod = keys.grant("0123456789abcdef0123").unwrap();
        assert!(prod.allows("vllm-prod-7"));
        assert!(prod.allows("vllm-canary"));
        assert!(!prod.allows("vllm-canary-2"));
        assert!(!prod.allows("sglang-1"));
        let refusal = prod.refusal("sglang-1");
        assert_eq!(refusal.field, "resource.instance_id");
        assert!(refusal.message.contains("\"prod\""), "{}", refusal.message);
        assert!(
            !refusal.message.contains("0123456789"),
            "never the key itself"
        );
        assert!(
            keys.grant("fedcba9876543210fedc")
                .unwrap()
                .allows("anything")
        );
        assert!(keys.grant("0123456789abcdef012").is_none());
        assert!(keys.grant("").is_none());
    }

    #[test]
    fn a_wrong_key_file_is_refused_naming_the_line() {
        let err = |text: &str| IngestKeys::parse(text).err().unwrap();
        assert!(err("a b").starts_with("line 1: expected"));
        assert!(err("\n\nprod short *").starts_with("line 3: the key of \"prod\" is 5 characters"));
        assert!(err("a 0123456789abcdef x\na 0123456789abcdeX y").contains("line 2: the name"));
        assert!(err("a 0123456789abcdef x\nb 0123456789abcdef y").contains("another name's key"));
        assert!(err("a 0123456789abcdef ,").contains("names no instance"));
        assert!(err("# only comments\n").contains("no keys"));
    }
}
