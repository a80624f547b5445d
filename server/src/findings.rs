//! The findings worker: one server of those sharing a database (an advisory lock decides which)
//! diagnoses what has settled and stores it (`query::findings`), then sleeps until more may be
//! due.

use std::time::Duration;

use crate::query::usage::Folds;
use crate::store::Store;

/// How often a server that is not the diagnosing one asks for the lock again.
const STANDBY: Duration = Duration::from_secs(10);

pub async fn run(store: Store, settle: Duration) {
    let _lock = loop {
        match store.try_diagnosis_lock().await {
            Ok(Some(lock)) => break lock,
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the findings worker cannot take its lock"),
        }
        tokio::time::sleep(STANDBY).await;
    };
    let idle = (settle / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let folds = Folds::default();
    loop {
        match crate::query::findings::drain(&store, &folds, settle).await {
            Ok(None) => tokio::time::sleep(idle).await,
            Ok(Some(n)) => tracing::debug!(requests = n, "findings stored"),
            Err(e) => {
                tracing::warn!(error = %e, "storing findings failed; will retry");
                tokio::time::sleep(STANDBY).await;
            }
        }
    }
}
