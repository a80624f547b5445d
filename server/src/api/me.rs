//! `GET /api/v1/me`: who reads, as far as the pages need to know (a reader scoped to tenants is
//! not offered what it may not use, and is told whose requests it sees).

use axum::Json;

use tokenscope_core::api::Me;

use crate::access::Scope;

pub(super) async fn me(scope: Scope) -> Json<Me> {
    Json(Me {
        tenants: match scope {
            Scope::All => None,
            Scope::Tenants { tenants, .. } => Some(tenants),
        },
    })
}
