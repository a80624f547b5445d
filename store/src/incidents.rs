//! Incidents as rows: a frozen view's slug, title, note, window, victims, culprits and headline
//! beside its snapshot (opaque bytes here; `crate::query::incidents` makes and reads them), the
//! revocation, and the cached preview picture.

use tokenscope_core::model::Nanos;

use super::Store;
use crate::error::{Error, Result};

/// An incident's row; `snapshot` is empty in lists and once revoked.
pub struct IncidentRow {
    pub slug: String,
    pub title: String,
    pub note: String,
    pub created_ns: Nanos,
    pub revoked_ns: Option<Nanos>,
    pub instances: Vec<String>,
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub victims: Vec<String>,
    pub culprits: Vec<String>,
    pub headline: String,
    pub snapshot: Vec<u8>,
    /// The tenants of the reader who made it, when scoped (readable only within them).
    pub tenants: Option<Vec<String>>,
}

impl Store {
    pub async fn insert_incident(&self, r: &IncidentRow) -> Result<()> {
        sqlx::query!(
            "INSERT INTO incidents (slug, title, note, created_ns, instances, from_ns, to_ns, victims, culprits, headline, snapshot, tenants)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            r.slug,
            r.title,
            r.note,
            r.created_ns,
            &r.instances,
            r.from_ns,
            r.to_ns,
            &r.victims,
            &r.culprits,
            r.headline,
            r.snapshot,
            r.tenants.as_deref(),
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The incident's row, revoked or not.
    pub async fn incident(&self, slug: &str) -> Result<IncidentRow> {
        sqlx::query_as!(
            IncidentRow,
            "SELECT slug, title, note, created_ns, revoked_ns, instances, from_ns, to_ns, victims, culprits, headline, snapshot, tenants
             FROM incidents WHERE slug = $1",
            slug
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no incident {slug:?}")))
    }

    /// Newest first, without snapshots; `q` matches title, headline, note, instance or request
    /// ids (case-insensitive). `within`: only those made by readers scoped to these tenants.
    pub async fn list_incidents(
        &self,
        q: Option<&str>,
        limit: i64,
        within: Option<&[String]>,
    ) -> Result<Vec<IncidentRow>> {
        let pattern = q.map(|q| {
            let escaped = q
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            format!("%{escaped}%")
        });
        Ok(sqlx::query_as!(
            IncidentRow,
            r#"SELECT slug, title, note, created_ns, revoked_ns, instances, from_ns, to_ns, victims, culprits, headline,
                      ''::bytea AS "snapshot!", tenants
             FROM incidents
             WHERE ($1::text IS NULL OR title ILIKE $1 OR headline ILIKE $1 OR note ILIKE $1
                    OR EXISTS (SELECT 1 FROM unnest(instances || victims) AS x WHERE x ILIKE $1))
               AND ($3::text[] IS NULL OR (tenants IS NOT NULL AND tenants <@ $3))
             ORDER BY created_ns DESC LIMIT $2"#,
            pattern,
            limit,
            within
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Revokes the link: the row stays (so the slug answers 410, not 404) but its evidence and
    /// preview are dropped.
    pub async fn revoke_incident(&self, slug: &str, now_ns: Nanos) -> Result<()> {
        let done = sqlx::query!(
            "UPDATE incidents SET revoked_ns = COALESCE(revoked_ns, $2), snapshot = '', preview_png = NULL, note = ''
             WHERE slug = $1",
            slug,
            now_ns
        )
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(Error::NotFound(format!("no incident {slug:?}")));
        }
        Ok(())
    }

    /// `None` when there is no such incident, else whether it was revoked.
    pub async fn incident_revoked(&self, slug: &str) -> Result<Option<bool>> {
        Ok(sqlx::query_scalar!(
            "SELECT revoked_ns IS NOT NULL AS \"revoked!\" FROM incidents WHERE slug = $1",
            slug
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    pub async fn incident_preview(&self, slug: &str) -> Result<Option<Vec<u8>>> {
        Ok(sqlx::query_scalar!(
            "SELECT preview_png FROM incidents WHERE slug = $1 AND revoked_ns IS NULL",
            slug
        )
        .fetch_optional(&self.pool)
        .await?
        .flatten())
    }

    pub async fn cache_incident_preview(&self, slug: &str, png: &[u8]) -> Result<()> {
        sqlx::query!(
            "UPDATE incidents SET preview_png = $2 WHERE slug = $1 AND revoked_ns IS NULL",
            slug,
            png
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The live (not revoked) incident an alert opened, by its key (fingerprint and start).
    pub async fn alert_incident(&self, alert_key: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar!(
            "SELECT a.slug FROM incident_alerts a JOIN incidents i ON i.slug = a.slug
             WHERE a.alert_key = $1 AND i.revoked_ns IS NULL",
            alert_key
        )
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Records that an alert opened `slug` (a revoked one's key now opens a new incident).
    pub async fn link_alert(&self, alert_key: &str, slug: &str) -> Result<()> {
        sqlx::query!(
            "INSERT INTO incident_alerts (alert_key, slug) VALUES ($1, $2)
             ON CONFLICT (alert_key) DO UPDATE SET slug = EXCLUDED.slug",
            alert_key,
            slug
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
