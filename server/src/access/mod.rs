//! Who may send and who may read: ingest keys (`keys`), read access and public incident links
//! (`read`), readers scoped to tenants (`scope`). Both are off unless configured; the server then behaves as a trusted-network tool.
//!
//! Secrets are held as SHA-256 digests and compared digest to digest over every byte, so the
//! time a comparison takes says nothing about how much of a guess was right. They are never
//! logged: logs name an ingest key by its name.

pub mod keys;
pub mod read;
pub mod scope;

use axum::http::{HeaderMap, header};
use sha2::{Digest as _, Sha256};

pub use keys::{Grant, IngestKeys, KeyLayer};
pub use read::{ReadAccess, Reader};
pub use scope::Scope;

/// What the operator configured (`serve` flags); the default lets everyone send and read.
#[derive(Clone, Default)]
pub struct AccessConfig {
    /// The ingest key file (`--ingest-keys`).
    pub ingest_keys: Option<std::path::PathBuf>,
    /// The shared read token (`--read-token`).
    pub read_token: Option<String>,
    /// Named read tokens, each scoped to tenants or not (`--read-tokens`).
    pub read_tokens: Option<std::path::PathBuf>,
    /// The header a trusted reverse proxy names the user in (`--trusted-user-header`).
    pub trusted_user_header: Option<String>,
    /// The header it names the user's tenants in (`--trusted-tenants-header`).
    pub trusted_tenants_header: Option<String>,
    /// Incident links readable without access (`--public-incidents`).
    pub public_incidents: bool,
}

/// Never prints the token.
impl std::fmt::Debug for AccessConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessConfig")
            .field("ingest_keys", &self.ingest_keys)
            .field("read_token", &self.read_token.as_ref().map(|_| "<set>"))
            .field("read_tokens", &self.read_tokens)
            .field("trusted_user_header", &self.trusted_user_header)
            .field("trusted_tenants_header", &self.trusted_tenants_header)
            .field("public_incidents", &self.public_incidents)
            .finish()
    }
}

/// A secret as it is held and compared.
pub(crate) type Digest = [u8; 32];

pub(crate) fn digest(secret: &str) -> Digest {
    Sha256::digest(secret.as_bytes()).into()
}

/// Equal digests, in time independent of where they differ.
pub(crate) fn same(a: &Digest, b: &Digest) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The credential of an `Authorization: Bearer <credential>` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credential) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credential.trim())
        .filter(|c| !c.is_empty())
}

/// Secrets shorter than this are refused at start: they could be guessed.
pub(crate) const MIN_SECRET_LEN: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_credentials_are_read_case_insensitively_and_only_from_bearer() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn digests_compare_equal_only_for_the_same_secret() {
        assert!(same(
            &digest("a-long-secret-0001"),
            &digest("a-long-secret-0001")
        ));
        assert!(!same(
            &digest("a-long-secret-0001"),
            &digest("a-long-secret-0002")
        ));
    }
}
