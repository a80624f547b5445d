//! File imports: TensorRT-LLM `/perf_metrics` and perf-time-events logs, and OpenAI-compatible
//! responses with logprobs. Each format is a pure adapter from bytes to the model.

// Phases, not long functions: no importer function over 120 lines (clippy.toml).
#[warn(clippy::too_many_lines)]
pub mod openai;
#[warn(clippy::too_many_lines)]
pub mod trtllm;

use tokenscope_core::model::{EngineKind, Nanos, Resource};

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
    /// Told apart by content (what the upload page sends).
    Auto,
}

impl Format {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "trtllm-perf-metrics" => Ok(Self::TrtllmPerfMetrics),
            "trtllm-iteration-log" => Ok(Self::TrtllmIterationLog),
            "openai" => Ok(Self::Openai),
            "native" => Ok(Self::Native),
            "auto" | "" => Ok(Self::Auto),
            other => Err(Error::InvalidArgument(format!(
                "format={other:?} is not one of auto, openai, trtllm-perf-metrics, trtllm-iteration-log, native"
            ))),
        }
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            Self::TrtllmPerfMetrics => "trtllm-perf-metrics",
            Self::TrtllmIterationLog => "trtllm-iteration-log",
            Self::Openai => "openai",
            Self::Native => "native",
            Self::Auto => "auto",
        }
    }

    /// `Auto` made concrete by the file's content; any other format as it is.
    pub fn resolve(self, bytes: &[u8]) -> Result<Self> {
        match self {
            Self::Auto => Self::detect(utf8(bytes)?),
            f => Ok(f),
        }
    }

    /// The format of a file by the keys of its first value.
    pub fn detect(text: &str) -> Result<Self> {
        let first = json_values(text)?.into_iter().next().ok_or_else(|| {
            Error::InvalidArgument("the file is empty: paste a response or a record".into())
        })?;
        let has = |k: &str| first.value.get(k).is_some();
        if has("choices") {
            Ok(Self::Openai)
        } else if has("perf_metrics") || has("timing_metrics") || has("ctx_server") {
            Ok(Self::TrtllmPerfMetrics)
        } else if has("time_breakdown_metrics") || has("request_timing_metrics") {
            Ok(Self::TrtllmIterationLog)
        } else if has("resource_traces") || has("resourceTraces") {
            Ok(Self::Native)
        } else {
            Err(Error::InvalidArgument(format!(
                "{}: not a format tokenscope reads: expected an OpenAI chat/completions response \
                 (with `choices` and `logprobs`), a TensorRT-LLM /perf_metrics record (with \
                 `perf_metrics`) or a perf-time-events line (with `time_breakdown_metrics`)",
                first.at
            )))
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

fn utf8(bytes: &[u8]) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|e| {
        Error::InvalidArgument(format!(
            "the file is not UTF-8 text (byte {} is not)",
            e.valid_up_to()
        ))
    })
}

pub fn decode(format: Format, bytes: &[u8], opts: &Options) -> Result<Imported> {
    let text = utf8(bytes)?;
    match format {
        // `detect` never answers `Auto`: one level of recursion.
        Format::Auto => decode(Format::detect(text)?, bytes, opts),
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
        let export: tokenscope_proto::v1::ExportRequest =
            serde_json::from_str(line).map_err(|e| {
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

/// One value of a file and where it was: `line 3` of JSON Lines, `item [2]` of an array, or
/// `the document`. Rejections quote it so the user finds the bad part.
pub(crate) struct Located {
    pub at: String,
    pub value: serde_json::Value,
}

/// Parses a whole JSON document (one value or an array of them), or JSON Lines (one value a
/// line). A document that is neither says where it broke: serde's line and column for a
/// document, the line for JSON Lines.
pub(crate) fn json_values(text: &str) -> Result<Vec<Located>> {
    let whole = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Array(items)) => {
            return Ok(items
                .into_iter()
                .enumerate()
                .map(|(i, value)| Located {
                    at: format!("item [{i}]"),
                    value,
                })
                .collect());
        }
        Ok(value) => {
            return Ok(vec![Located {
                at: "the document".into(),
                value,
            }]);
        }
        Err(e) => e,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    // JSON Lines only if the first line is a value by itself; else it is one broken document.
    match lines.next() {
        Some((_, first)) if serde_json::from_str::<serde_json::Value>(first).is_ok() => {}
        _ => return Err(Error::InvalidArgument(format!("not JSON: {whole}"))),
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map(|value| Located {
                    at: format!("line {}", i + 1),
                    value,
                })
                .map_err(|e| Error::InvalidArgument(format!("line {}: not JSON: {e}", i + 1)))
        })
        .collect()
}

/// Decodes a file and stores it; the reply lists what was kept, refused and approximated.
pub async fn import(
    sink: &super::Sink,
    format: Format,
    bytes: &[u8],
    opts: &Options,
    grant: &crate::access::Grant,
) -> Result<tokenscope_core::api::ImportReply> {
    let format = format.resolve(bytes)?;
    let Imported { decoded, warnings } = decode(format, bytes, opts)?;
    let requests = decoded
        .batches
        .iter()
        .flat_map(|b| {
            b.requests
                .iter()
                .map(|r| tokenscope_core::api::ImportedRequest {
                    instance: b.resource.instance_id.clone(),
                    request_id: r.value.request_id.clone(),
                })
        })
        .take(100)
        .collect();
    let r = super::store_decoded(sink, crate::metrics::Source::Import, grant, decoded).await?;
    Ok(tokenscope_core::api::ImportReply {
        accepted_requests: r.accepted_requests,
        duplicate_requests: r.duplicate_requests,
        rejected_requests: r.rejected_requests,
        accepted_iterations: r.accepted_iterations,
        rejected_iterations: r.rejected_iterations,
        rejections: r
            .rejections
            .into_iter()
            .map(|x| tokenscope_core::api::Rejection {
                item: x.item,
                field: x.field,
                message: x.message,
            })
            .collect(),
        warnings,
        requests,
        format: format.name().into(),
    })
}

impl Format {
    /// Instance name used when the caller gives none.
    pub fn default_instance(self) -> &'static str {
        match self {
            Format::TrtllmPerfMetrics | Format::TrtllmIterationLog => "trtllm-import",
            Format::Openai => "openai-import",
            Format::Native => "native-import",
            Format::Auto => "import",
        }
    }
}
