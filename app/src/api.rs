//! The JSON query API's response types: a stable contract shared by the server and the browser.
//!
//! Field names here are public: other tools and the UI rely on them. Durations are milliseconds
//! (`*_ms`, floats), instants are Unix nanoseconds (`*_ns`, integers).

use serde::{Deserialize, Serialize};

use crate::analysis::diagnosis::Cause;
use crate::model::{EngineKind, FinishReason, Nanos, Role, SamplingParams, SpecialToken};

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
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestList {
    pub requests: Vec<RequestSummary>,
    /// How many requests match the filters in all (the list is one page of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    Queued,
    Prefill,
    Decode,
    Preempted,
    KvTransfer,
}

impl StageKind {
    /// Every kind, in the order a request lives them (legends list them so).
    pub const ALL: [StageKind; 5] = [
        StageKind::Queued,
        StageKind::Prefill,
        StageKind::Decode,
        StageKind::Preempted,
        StageKind::KvTransfer,
    ];

    /// The name people read (`KV transfer`).
    pub fn label(self) -> &'static str {
        match self {
            StageKind::Queued => "queued",
            StageKind::Prefill => "prefill",
            StageKind::Decode => "decode",
            StageKind::Preempted => "preempted",
            StageKind::KvTransfer => "KV transfer",
        }
    }
}

/// One bar of a request's timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub kind: StageKind,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    /// Prompt tokens of a prefill chunk, output tokens of the decode stage.
    pub tokens: Option<u32>,
    pub iteration: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateView {
    /// `null` when the source gave only the text.
    pub token_id: Option<u32>,
    pub text: Option<String>,
    pub logprob: f32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenView {
    pub index: u32,
    /// `null` for timing-only or text-only sources.
    pub token_id: Option<u32>,
    pub text: Option<String>,
    pub is_special: bool,
    /// Which special token ("eos", "bos", "pad", "other"); "none" for ordinary text.
    pub special: SpecialToken,
    pub emitted_ns: Option<Nanos>,
    /// When the step that produced the token was scheduled: emitted − scheduled is compute time.
    pub scheduled_ns: Option<Nanos>,
    /// Gap since the previous token; for token 0, the time to first token.
    pub latency_ms: Option<f64>,
    pub iteration: Option<u64>,
    pub logprob: Option<f32>,
    pub rank: Option<u32>,
    pub candidates: Vec<CandidateView>,
    /// Requests in the engine batch that produced this token (from iteration records).
    pub batch_size: Option<u32>,
    /// Requests waiting in the engine queue at that step.
    pub waiting: Option<u32>,
    /// The latency split: waiting to be scheduled (since the previous token, or arrival for
    /// token 0) and computing (scheduled → emitted).
    pub wait_ms: Option<f64>,
    pub compute_ms: Option<f64>,
    /// What else the producing step computed.
    pub step_prefill_tokens: Option<u32>,
    pub step_decode_tokens: Option<u32>,
    /// Other requests that prefilled in the producing step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_prefill_requests: Vec<String>,
    /// Other requests that prefilled while this token was awaited (the steps between the
    /// previous token, or arrival, and this one): who the engine served instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefilled_meanwhile: Vec<String>,
    /// Their prompt tokens computed in that time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefill_tokens_meanwhile: u32,
    /// Word choice: probability of the chosen token, entropy of the candidates (nats), and the
    /// chosen token's probability minus the best other candidate's (negative: a likelier one existed).
    pub probability: Option<f32>,
    pub entropy: Option<f32>,
    pub margin: Option<f32>,
    /// "slo_breach" (latency above the TPOT SLO), "far_from_top" (rank > 1, unlikely),
    /// "low_probability_eos".
    pub flags: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestDetail {
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

/// Latency over time (`GET /api/v1/latency`): the requests that arrived in each bucket of a
/// window, their TTFT and TPOT percentiles and how many broke each SLO. Buckets without
/// requests are left out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySeries {
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub bucket_ns: Nanos,
    pub ttft_slo_ms: f64,
    pub tpot_slo_ms: f64,
    pub buckets: Vec<LatencyBucket>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyBucket {
    pub start_ns: Nanos,
    pub requests: u32,
    /// `null` when no request of the bucket has a first token (or, for TPOT, a second one).
    pub ttft_ms: Option<Percentiles>,
    pub tpot_ms: Option<Percentiles>,
    pub ttft_over_slo: u32,
    pub tpot_over_slo: u32,
}

/// Nearest-rank percentiles: each is a latency some request actually had.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Percentiles {
    /// From nanoseconds as SQL computes them; `None` when there was nothing to rank.
    pub fn from_ns(p50: Option<Nanos>, p90: Option<Nanos>, p99: Option<Nanos>) -> Option<Self> {
        Some(Self {
            p50: crate::model::ms(p50?),
            p90: crate::model::ms(p90?),
            p99: crate::model::ms(p99?),
        })
    }
}

/// One side of a comparison (`GET /api/v1/compare`): which requests, their latency percentiles
/// over the whole side, the percentiles over time, histograms and the causes diagnosed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareSide {
    pub instances: Vec<String>,
    pub engine: Option<String>,
    pub engine_version: Option<String>,
    pub model: Option<String>,
    pub from_ns: Nanos,
    pub to_ns: Nanos,
    pub requests: u64,
    pub ttft_ms: Option<Percentiles>,
    pub tpot_ms: Option<Percentiles>,
    pub queue_ms: Option<Percentiles>,
    pub e2e_ms: Option<Percentiles>,
    pub series: LatencySeries,
    /// Requests per latency bin; bins are shared by both sides (quarter octaves of a millisecond).
    pub ttft_histogram: Vec<HistogramBin>,
    pub tpot_histogram: Vec<HistogramBin>,
    /// Degraded requests per diagnosis cause, most frequent first.
    pub causes: Vec<CauseCount>,
    /// Requests the cause counts looked at (the first ones of the side, at most a few thousand).
    pub diagnosed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistogramBin {
    pub lo_ms: f64,
    pub hi_ms: f64,
    pub requests: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CauseCount {
    pub cause: Cause,
    pub requests: u32,
    /// The worst requests with this cause (up to three), to open as examples.
    pub examples: Vec<String>,
}

/// Side B against side A, one number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// "ttft", "tpot", "queue" or "e2e".
    pub metric: String,
    /// "p50", "p90" or "p99".
    pub percentile: String,
    pub a_ms: f64,
    pub b_ms: f64,
    /// `b − a`; positive means B is slower.
    pub delta_ms: f64,
    /// The change relative to A, in percent (`null` when A is 0).
    pub delta_pct: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The answer in one line: the largest change and the cause that grew most.
    pub headline: String,
    pub a: CompareSide,
    pub b: CompareSide,
    pub deltas: Vec<Delta>,
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

/// Reply of `POST /api/v1/incidents`: where the incident lives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreatedIncident {
    pub slug: String,
    /// The page's path (`/incidents/{slug}`).
    pub path: String,
}
