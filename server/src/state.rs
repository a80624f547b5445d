//! What the HTTP port's handlers share, built once at start: the axum state. Each handler takes
//! only the part it needs (`State<Store>`, `State<Sink>`, …) through `FromRef`.

use std::sync::Arc;

use axum::extract::FromRef;

use crate::access::ReadAccess;
use crate::ingest::Sink;
use crate::ingest::budget::Budget;
use crate::ingest::otlp_endpoints::Otlp;
use crate::live::Live;
use crate::metrics::Metrics;
use crate::store::Store;

#[derive(Clone)]
pub struct AppState {
    /// Where ingest stores (the store, the metrics it counts into, `--redact-text`); its store
    /// is also what the query API and the pages read.
    pub sink: Sink,
    /// OTLP ingest and the spans it holds.
    pub otlp: Otlp,
    /// The ingest byte budget of both ports.
    pub budget: Budget,
    /// Who may read, and the sign-in.
    pub read: Arc<ReadAccess>,
    /// What open live pages are told.
    pub live: Live,
}

impl AppState {
    /// The self-metrics every ingest path counts into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.sink.metrics
    }
}

macro_rules! part {
    ($t:ty, $field:ident) => {
        impl FromRef<AppState> for $t {
            fn from_ref(s: &AppState) -> Self {
                s.$field.clone()
            }
        }
    };
}
impl FromRef<AppState> for Store {
    fn from_ref(s: &AppState) -> Self {
        s.sink.store.clone()
    }
}
part!(Sink, sink);
part!(Otlp, otlp);
part!(Budget, budget);
part!(Arc<ReadAccess>, read);
part!(Live, live);
