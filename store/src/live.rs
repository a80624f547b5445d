//! New data, announced: each write that stores requests or steps notifies the channel
//! `tokenscope_ingest` in its transaction (so only on commit), and every server listens, so a
//! page open on one server follows data ingested through another.

use serde::{Deserialize, Serialize};
use sqlx::postgres::PgListener;

use tokenscope_core::model::Nanos;

use super::Store;
use crate::error::{Error, Result};

/// The Postgres channel of `Ingested` notices.
pub(crate) const CHANNEL: &str = "tokenscope_ingest";

/// One committed write, as its notice's JSON payload holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ingested {
    /// The instance's key (`Resource::instance_id`).
    pub instance: String,
    /// The latest time the write's requests and steps reach.
    pub newest_ns: Nanos,
}

/// A connection listening for `Ingested` notices.
pub struct IngestListener(PgListener);

impl IngestListener {
    /// The next notice. After the connection drops, sqlx reconnects and this returns `Ok(None)`
    /// once: notices sent meanwhile are lost, so the caller should treat every instance as
    /// changed.
    pub async fn next(&mut self) -> Result<Option<Ingested>> {
        match self.0.try_recv().await? {
            None => Ok(None),
            Some(n) => serde_json::from_str(n.payload())
                .map(Some)
                .map_err(|e| Error::Internal(format!("a {CHANNEL} notice {:?}: {e}", n.payload()))),
        }
    }
}

impl Store {
    /// A listener for writes committed from now on, by any server on this database.
    pub async fn listen_ingest(&self) -> Result<IngestListener> {
        let mut l = PgListener::connect_with(&self.pool).await?;
        l.listen(CHANNEL).await?;
        Ok(IngestListener(l))
    }
}
