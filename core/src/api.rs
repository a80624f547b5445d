//! The JSON query API's response types: a stable contract shared by the server and the browser.
//!
//! Field names here are public: other tools and the UI rely on them. Durations are milliseconds
//! (`*_ms`, floats), instants are Unix nanoseconds (`*_ns`, integers).

use serde::{Deserialize, Serialize};

// What the analysis computes is part of the contract as it is: the API names those types here.
pub use crate::analysis::answers::{AnswerDrift, AnswerPair, AnswerRef};
pub use crate::analysis::compare::{CauseCount, CompareSide, Delta, HistogramBin, WordChoice};
pub use crate::analysis::fingerprint::{
    Family, Fingerprints, HitCell, MissWhy, Pressure, WarmMiss,
};
pub use crate::analysis::metrics::{LatencyBucket, LatencySeries, Percentiles};
pub use crate::analysis::slow_set::{Attribute, Separator, SlowSet};
pub use crate::analysis::stages::{Stage, StageKind};
pub use crate::analysis::token_view::{CandidateView, TokenView};
pub use crate::analysis::usage::{Usage, UsageBucket, UsageGroup};
use crate::model::{EngineKind, FinishReason, Nanos, Role, SamplingParams, Served};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestSummary {
    pub request_id: String,
    pub engine: EngineKind,
    pub instance: String,
    pub model: String,
    pub arrival_ns: Nanos,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
    pub queue_ms: Option<f64>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub finish_reason: FinishReason,
    /// In lists: the causes of its stored findings (empty: healthy); absent while its findings
    /// are being worked out (data around it arrived within the settle time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causes: Option<Vec<String>>,
    /// Whom it was served for, and through which LoRA adapter (when the engine said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_adapter: Option<String>,
}

/// A request whose stored findings name another as a culprit (`GET …/victims`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Victim {
    pub request_id: String,
    pub instance: String,
    /// The causes of its findings that name the culprit.
    pub causes: Vec<String>,
    /// How long the culprit held the engine in its wait or stall, from the findings' evidence.
    pub held_ms: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VictimList {
    /// Most held first.
    pub victims: Vec<Victim>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestList {
    pub requests: Vec<RequestSummary>,
    /// How many requests match the filters in all (the list is one page of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// `total` is the database's estimate, not a count: counting millions of rows for a page
    /// header would cost seconds (the UI says "about").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub total_estimated: bool,
    /// When the findings worker is behind on the page's requests: the arrival time up to which
    /// their causes are known, and how long the oldest data has waited for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings_behind: Option<FindingsBehind>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FindingsBehind {
    /// Requests that arrived before this have their stored findings (on the list's instances).
    pub up_to_ns: Nanos,
    pub waited_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestDetail {
    /// For whom, through which adapter, at which priority, what the prefix cache served. Before
    /// `summary`: both are flattened and a list row's summary names the tenant and adapter too;
    /// read back, the first flattened field takes a key (the detail leaves the summary's unset).
    #[serde(flatten)]
    pub served: Served,
    #[serde(flatten)]
    pub summary: RequestSummary,
    pub role: Role,
    pub trace_id: Option<String>,
    pub parent_span_id: Option<String>,
    pub finished_ns: Nanos,
    pub cached_tokens: u32,
    pub sampling: SamplingParams,
    pub preemptions: u32,
    pub stages: Vec<Stage>,
    pub tokens: Vec<TokenView>,
    /// A PD request's parts in order (prefilled on one instance, decoded on another), when its
    /// id was asked for on several: the rest of the detail is then the request the client saw
    /// (`instance` lists the parts' instances, comma-separated; tokens are the decode part's).
    /// Empty for a request served by one instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<RequestPart>,
    /// What the reader should know about how the record was put together (a PD request whose
    /// instances' clocks disagree, and how its parts were aligned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl RequestDetail {
    /// The request's stalled spans (see [`crate::analysis::diagnosis::stalls`]).
    pub fn stalls(&self, ttft_slo_ms: f64, tpot_slo_ms: f64) -> Vec<(Nanos, Nanos)> {
        let times: Vec<Nanos> = self.tokens.iter().filter_map(|t| t.emitted_ns).collect();
        crate::analysis::diagnosis::stalls(
            self.summary.arrival_ns,
            &times,
            ttft_slo_ms,
            tpot_slo_ms,
        )
    }
}

/// One instance's part of a PD request, as that instance stored it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestPart {
    pub instance: String,
    pub role: Role,
    pub engine: EngineKind,
    pub arrival_ns: Nanos,
    pub finished_ns: Nanos,
    /// From this part's arrival to its own first token.
    pub ttft_ms: Option<f64>,
    pub queue_ms: Option<f64>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceInfo {
    pub instance: String,
    pub engine: EngineKind,
    pub engine_version: String,
    pub model: String,
    pub role: Role,
    pub host: String,
    pub first_seen_ns: Nanos,
    pub last_seen_ns: Nanos,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceList {
    pub instances: Vec<InstanceInfo>,
}

/// Who reads (`GET /api/v1/me`): what the pages offer depends on it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Me {
    /// The tenants a reader scoped to tenants sees; `None`: every tenant.
    pub tenants: Option<Vec<String>>,
}

/// An event of `GET /api/v1/live` (server-sent events). `ready` (on opening, and whenever the
/// server may have missed news): read everything again; `ingested`: these instances' data grew.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveTick {
    /// The newest time the stored data of the stream's instances reaches, as far as this server
    /// has heard since it started (`None`: nothing yet).
    pub newest_ns: Option<Nanos>,
    /// The instances whose data grew since the stream's last event, with how far each reaches
    /// now (on `ready`: every one heard of).
    #[serde(default)]
    pub instances: std::collections::BTreeMap<String, Nanos>,
}

/// One refused item of an ingest or import.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rejection {
    pub item: String,
    pub field: String,
    pub message: String,
}

/// Reply of `POST /api/v1/import` (and what `tokenscope import` prints).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportReply {
    pub accepted_requests: u64,
    pub duplicate_requests: u64,
    pub rejected_requests: u64,
    pub accepted_iterations: u64,
    pub rejected_iterations: u64,
    pub rejections: Vec<Rejection>,
    /// What the format could not say exactly (estimated counts, anchored clocks, …).
    pub warnings: Vec<String>,
    /// The valid requests of the file (new or already stored), where to open them: the first
    /// 100, in file order.
    #[serde(default)]
    pub requests: Vec<ImportedRequest>,
    /// Which format the file was read as (told apart by content when none was given).
    #[serde(default)]
    pub format: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportedRequest {
    pub instance: String,
    pub request_id: String,
}

/// Body of every error reply: what was wrong, in words a user can act on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// The body of an error reply as the API words it (`{"error": "..."}`), else the raw text.
pub fn error_text(status: u16, body: &str) -> String {
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(e) => e.error,
        Err(_) => format!("HTTP {status}: {body}"),
    }
}

/// The API as a function of a GET's path and query, answering its JSON body or an error
/// sentence: how a page rendered on the server fetches its data (the server's own router, called
/// without a socket). The server provides it in the render's context; the UI asks it.
#[derive(Clone)]
pub struct ApiClient(
    #[allow(clippy::type_complexity)]
    pub  std::sync::Arc<
        dyn Fn(
                String,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<String, String>> + Send>,
            > + Send
            + Sync,
    >,
);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The answer in one line: the largest change and the cause that grew most.
    pub headline: String,
    pub a: CompareSide,
    pub b: CompareSide,
    pub deltas: Vec<Delta>,
    /// The same prompts' answers on both sides (when the engines sent prompt fingerprints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<AnswerDrift>,
}

/// What an incident froze: the window's waterfall (victims and culprits pulled together) and each
/// victim's full request view with its diagnosis, enough to redraw the page and the preview
/// after the raw traces are gone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IncidentSnapshot {
    pub waterfall: crate::analysis::waterfall::Waterfall,
    pub requests: Vec<IncidentRequest>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IncidentRequest {
    pub detail: RequestDetail,
    pub diagnosis: crate::analysis::diagnosis::Diagnosis,
}

/// An incident as listed (`GET /api/v1/incidents`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IncidentSummary {
    pub slug: String,
    pub title: String,
    pub created_ns: Nanos,
    pub revoked: bool,
    pub instances: Vec<String>,
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub victims: Vec<String>,
    pub culprits: Vec<String>,
    /// The first finding's sentence (the story in one line).
    pub headline: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IncidentList {
    pub incidents: Vec<IncidentSummary>,
}

/// One incident with its frozen evidence (`GET /api/v1/incidents/{slug}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    #[serde(flatten)]
    pub summary: IncidentSummary,
    pub note: String,
    pub snapshot: IncidentSnapshot,
    /// Whether the reader who asked may revoke it: false for someone who reached it only through
    /// its public link (`--public-incidents`), so the page offers them no "revoke link".
    #[serde(default)]
    pub can_revoke: bool,
}

/// Body of `POST /api/v1/incidents`: the requests to freeze, on one or more instances; the window
/// defaults to the victims' lifetimes with some context around them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewIncident {
    pub title: String,
    #[serde(default)]
    pub note: String,
    pub instance: String,
    pub requests: Vec<String>,
    #[serde(default)]
    pub from_ns: Option<Nanos>,
    #[serde(default)]
    pub to_ns: Option<Nanos>,
}

/// Reply of `POST /api/v1/alerts/alertmanager`: the incident each firing alert opened, and the
/// alerts that opened none, with why.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AlertReply {
    pub incidents: Vec<AlertIncident>,
    pub skipped: Vec<AlertSkipped>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertIncident {
    /// Alertmanager's fingerprint of the alert, and its `alertname` label.
    pub fingerprint: String,
    pub alertname: String,
    pub slug: String,
    /// The incident page's full address.
    pub url: String,
    /// Opened by an earlier send of the same alert (same fingerprint and start).
    pub reused: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertSkipped {
    pub fingerprint: String,
    pub alertname: String,
    pub reason: String,
}

/// Reply of `POST /api/v1/incidents`: where the incident lives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreatedIncident {
    pub slug: String,
    /// The page's path (`/incidents/{slug}`).
    pub path: String,
}
