//! File imports: TensorRT-LLM `/perf_metrics` and perf-time-events logs, and OpenAI-compatible
//! responses with logprobs. Each format is a pure adapter from bytes to the model.

pub mod openai;
pub mod trtllm;

use app::model::{EngineKind, Nanos, Resource};

use super::Decoded;
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// TensorRT-LLM `GET /perf_metrics` JSON (an array of per-request records).
    TrtllmPerfMetrics,
    /// TensorRT-LLM perf-time-events JSONL (`TRTLLM_PERF_TIME_EVENTS_PATH`), one request a line.
    TrtllmIterationLog,
    /// OpenAI-compatible chat or completions responses with logprobs (one JSON, or JSONL).
    Openai,
    /// tokenscope's own ExportRequest in proto3 JSON, one per line (what `tokenscope sim --out` writes).
    Native,
}

impl Format {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "trtllm-perf-metrics" => Ok(Self::TrtllmPerfMetrics),
            "trtllm-iteration-log" => Ok(Self::TrtllmIterationLog),
            "openai" => Ok(Self::Openai),
            "native" => Ok(Self::Native),
            other => Err(Error::InvalidArgument(format!(
                "format={other:?} is not one of trtllm-perf-metrics, trtllm-iteration-log, openai"
            ))),
        }
    }
}

/// What the file itself does not say.
#[derive(Clone, Debug)]
pub struct Options {
    pub instance: String,
    pub model: Option<String>,
    /// Added to the file's times to make Unix seconds. TensorRT-LLM stamps with a steady clock
    /// (seconds since boot); without an offset the latest time is taken to be `now_ns`.
    pub clock_offset_s: Option<f64>,
    pub now_ns: Nanos,
}

/// The result of an import: model values per resource plus what could not be mapped exactly.
#[derive(Debug, Default)]
pub struct Imported {
    pub decoded: Decoded,
    pub warnings: Vec<String>,
}

pub fn decode(format: Format, bytes: &[u8], opts: &Options) -> Result<Imported> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Error::InvalidArgument("the file is not UTF-8 text".into()))?;
    match format {
        Format::TrtllmPerfMetrics => trtllm::perf_metrics(text, opts),
        Format::TrtllmIterationLog => trtllm::iteration_log(text, opts),
        Format::Openai => openai::responses(text, opts),
        Format::Native => native_lines(text),
    }
}

/// Native export requests, one per line; the instances are those the requests name.
fn native_lines(text: &str) -> Result<Imported> {
    let mut out = Imported::default();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let export: crate::proto::v1::ExportRequest = serde_json::from_str(line).map_err(|e| {
            Error::InvalidArgument(format!(
                "line {}: not a tokenscope.v1.ExportRequest: {e}",
                i + 1
            ))
        })?;
        let decoded = super::native::decode(export);
        out.decoded.batches.extend(decoded.batches);
        out.decoded.rejections.extend(decoded.rejections);
    }
    Ok(out)
}

pub(crate) fn resource(opts: &Options, engine: EngineKind, model: Option<&str>) -> Resource {
    Resource {
        engine,
        engine_version: String::new(),
        model: opts
            .model
            .clone()
            .or(model.map(str::to_string))
            .unwrap_or_else(|| "unknown".into()),
        instance_id: opts.instance.clone(),
        role: Default::default(),
        host: String::new(),
    }
}

/// Parses a whole JSON document, or JSON Lines (one value a line), naming the bad line.
pub(crate) fn json_values(text: &str) -> Result<Vec<serde_json::Value>> {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        return Ok(match v {
            serde_json::Value::Array(items) => items,
            one => vec![one],
        });
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| Error::InvalidArgument(format!("line {}: not JSON: {e}", i + 1)))
        })
        .collect()
}

/// Decodes a file and stores it; the reply lists what was kept, refused and approximated.
pub async fn import(
    store: &crate::store::Store,
    format: Format,
    bytes: &[u8],
    opts: &Options,
) -> Result<app::api::ImportReply> {
    let Imported { decoded, warnings } = decode(format, bytes, opts)?;
    let r = super::store_decoded(store, decoded).await?;
    Ok(app::api::ImportReply {
        accepted_requests: r.accepted_requests,
        duplicate_requests: r.duplicate_requests,
        rejected_requests: r.rejected_requests,
        accepted_iterations: r.accepted_iterations,
        rejected_iterations: r.rejected_iterations,
        rejections: r
            .rejections
            .into_iter()
            .map(|x| app::api::Rejection {
                item: x.item,
                field: x.field,
                message: x.message,
            })
            .collect(),
        warnings,
    })
}

impl Format {
    /// Instance name used when the caller gives none.
    pub fn default_instance(self) -> &'static str {
        match self {
            Format::TrtllmPerfMetrics | Format::TrtllmIterationLog => "trtllm-import",
            Format::Openai => "openai-import",
            Format::Native => "native-import",
        }
    }
}
