//! Alerts that open incidents: a firing alert scoped to an instance (and maybe a model and a
//! tenant) over a window freezes that window's worst degraded requests into an incident.

use tokenscope_core::analysis::diagnosis::Thresholds;
use tokenscope_core::api::NewIncident;
use tokenscope_core::model::Nanos;

use super::{diagnosis, incidents};
use crate::error::Result;
use crate::store::{RequestFilter, Store};

/// At most this many victims in an alert's incident, worst first.
pub const VICTIMS: usize = 10;

/// What an alert asks about, as the API read it from the alert's labels and times.
pub struct AlertScope {
    /// The alert as itself: its fingerprint and start (the same alert sent again has the same).
    pub key: String,
    pub instance: String,
    pub model: Option<String>,
    pub tenant: Option<String>,
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub title: String,
    pub note: String,
}

/// What an alert opened.
pub enum Opened {
    /// An incident; `reused` when an earlier send of the same alert opened it.
    Incident { slug: String, reused: bool },
    /// Nothing degraded in the alert's window on its instance: no incident.
    NothingDegraded,
}

pub async fn open(store: &Store, scope: AlertScope, now_ns: Nanos) -> Result<Opened> {
    if let Some(slug) = store.alert_incident(&scope.key).await? {
        return Ok(Opened::Incident { slug, reused: true });
    }
    let f = RequestFilter {
        instances: vec![scope.instance.clone()],
        model: scope.model,
        tenants: scope.tenant.map(|t| vec![t]),
        from_ns: Some(scope.from_ns),
        to_ns: Some(scope.to_ns),
        ..RequestFilter::default()
    };
    let worst = diagnosis::window(store, &f, &Thresholds::default(), VICTIMS as i64).await?;
    if worst.is_empty() {
        return Ok(Opened::NothingDegraded);
    }
    let new = NewIncident {
        title: scope.title,
        note: scope.note,
        instance: scope.instance,
        requests: worst.iter().map(|d| d.request_id.clone()).collect(),
        // Framed around the victims: a firing alert's window runs to now, past the data.
        from_ns: None,
        to_ns: None,
    };
    let slug = incidents::create(store, &new, now_ns).await?;
    store.link_alert(&scope.key, &slug).await?;
    Ok(Opened::Incident {
        slug,
        reused: false,
    })
}
