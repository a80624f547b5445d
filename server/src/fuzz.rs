//! Every decoder of bytes from outside, as one function of `&[u8]` each: what the fuzz targets
//! in `fuzz/` call, and what the tests below run over seed corpora and arbitrary bytes. Each must
//! answer anything with a value or an error: never a panic, never an allocation the input's
//! size does not justify.

use std::time::Duration;

use prost::Message;

use crate::access::Grant;
use crate::ingest::{import, native, otlp};
use crate::store::{batch_block, step_block, token_block};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokenscope_proto::v1;

/// The time decoders are run at (2026-11-30T07:00:00Z): imports anchor steady clocks to it, token
/// blocks count from it.
const T0: i64 = 1_796_022_000_000_000_000;

/// A decoder under fuzzing: it takes any bytes.
pub type Target = fn(&[u8]);

/// The decoders, by the name of their fuzz target.
pub const TARGETS: [(&str, Target); 8] = [
    ("native_proto", native_proto),
    ("native_json", native_json),
    ("otlp_proto", otlp_proto),
    ("otlp_json", otlp_json),
    ("import", import_file),
    ("token_block", token_block),
    ("batch_block", batch_block),
    ("step_block", step_block),
];

/// Native gRPC: protobuf, then the adapter.
pub fn native_proto(data: &[u8]) {
    if let Ok(req) = v1::ExportRequest::decode(data) {
        let _ = native::decode(req);
    }
}

/// Native JSON (`POST /api/v1/traces`): proto3 JSON, then the adapter.
pub fn native_json(data: &[u8]) {
    if let Ok(req) = serde_json::from_slice::<v1::ExportRequest>(data) {
        let _ = native::decode(req);
    }
}

/// OTLP spans through every adapter (vLLM, TensorRT-LLM, SGLang with its assembler and its
/// timeout sweep).
fn otlp_mapped(req: ExportTraceServiceRequest) {
    let assembler = otlp::assemble::Assembler::default();
    let mapping = otlp::Mapping::default();
    let _ = otlp::decode(req, Some("127.0.0.1"), &assembler, &Grant::All, &mapping);
    let _ = otlp::expired(&assembler, Duration::ZERO, None, &mapping);
}

pub fn otlp_proto(data: &[u8]) {
    if let Ok(req) = ExportTraceServiceRequest::decode(data) {
        otlp_mapped(req);
    }
}

pub fn otlp_json(data: &[u8]) {
    if let Ok(req) = serde_json::from_slice::<ExportTraceServiceRequest>(data) {
        otlp_mapped(req);
    }
}

/// An imported file; the first byte picks the format (auto-detection among them).
pub fn import_file(data: &[u8]) {
    let Some((&pick, file)) = data.split_first() else {
        return;
    };
    let formats = [
        import::Format::Auto,
        import::Format::Openai,
        import::Format::TrtllmPerfMetrics,
        import::Format::TrtllmIterationLog,
        import::Format::Native,
    ];
    let opts = import::Options {
        instance: "fuzz".into(),
        model: None,
        clock_offset_s: None,
        now_ns: T0,
    };
    let format = formats[pick as usize % formats.len()];
    if let Ok(format) = format.resolve(file) {
        let _ = import::decode(format, file, &opts);
    }
}

/// A stored token block (read back from the database, which a fault or a hand may corrupt).
pub fn token_block(data: &[u8]) {
    let _ = token_block::decode(data, T0);
}

/// A stored iteration batch.
pub fn batch_block(data: &[u8]) {
    let _ = batch_block::decode(data);
}

/// A stored block of steps, with each step's batch.
pub fn step_block(data: &[u8]) {
    if let Ok(block) = step_block::decode(data) {
        for k in 0..block.steps.len() {
            let _ = batch_block::decode(block.batch(k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The committed seeds, a folder per target.
    const SEEDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds");

    /// Inputs each target starts from: the repository's fixtures and codec outputs.
    fn seeds(target: &str) -> Vec<Vec<u8>> {
        let Ok(entries) = std::fs::read_dir(format!("{SEEDS}/{target}")) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
            .collect()
    }

    /// The seeds as they should be: fixtures of every engine and format, and codec outputs.
    fn fresh_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
        use crate::fixtures;
        let fixture = |p: &str| {
            std::fs::read(format!("{}/tests/fixtures/{p}", env!("CARGO_MANIFEST_DIR"))).unwrap()
        };
        let mut out = Vec::new();
        let r = fixtures::request("seed", T0, 6, 3, 1, 1);
        let its = fixtures::iterations_for(&r, 2, 0);
        let export = v1::ExportRequest {
            resource_traces: vec![tokenscope_proto::wire::to_wire(
                &fixtures::resource("gpu-0"),
                std::slice::from_ref(&r),
                &its,
            )],
        };
        out.push(("native_proto", "request".into(), export.encode_to_vec()));
        let json = serde_json::to_vec(&export).unwrap();
        out.push(("native_json", "request.json".into(), json.clone()));
        for f in [
            "vllm/llm_request_token_arrays.otlp.json",
            "vllm/llm_request_token_events.otlp.json",
            "trtllm/llm_request_kv_transfer.otlp.json",
            "sglang/request_in_three_exports.otlp.json",
        ] {
            let name = f.replace('/', "_");
            let text = fixture(f);
            // A fixture holds one export, or several (SGLang's three) as a JSON array.
            let value: serde_json::Value = serde_json::from_slice(&text).unwrap();
            let exports = match value {
                serde_json::Value::Array(v) => v,
                v => vec![v],
            };
            for (i, e) in exports.into_iter().enumerate() {
                let req: ExportTraceServiceRequest = serde_json::from_value(e.clone()).unwrap();
                out.push(("otlp_proto", format!("{name}.{i}"), req.encode_to_vec()));
                out.push((
                    "otlp_json",
                    format!("{name}.{i}"),
                    e.to_string().into_bytes(),
                ));
            }
        }
        for (pick, f) in [
            (1u8, "openai/chat_logprobs.json"),
            (1, "openai/completions.jsonl"),
            (2, "trtllm/perf_metrics.json"),
            (2, "trtllm/perf_metrics_disagg.json"),
            (0, "trtllm/perf_metrics_worker_record.json"),
            (3, "trtllm/time_events_rank0_pid4242.jsonl"),
        ] {
            let mut bytes = vec![pick];
            bytes.extend(fixture(f));
            out.push(("import", f.replace('/', "_"), bytes));
        }
        let mut native_line = vec![4u8];
        native_line.extend(&json);
        out.push(("import", "native.jsonl".into(), native_line));
        let block = token_block::encode(
            &r.tokens,
            r.arrival_ns,
            token_block::own_texts(|id, _| id % 2 == 0),
        );
        out.push(("token_block", "request".into(), block));
        let keys: std::collections::HashMap<_, _> = its
            .iter()
            .flat_map(|i| &i.batch)
            .enumerate()
            .map(|(k, e)| (e.request_id.to_string(), k as i64))
            .collect();
        let mut steps = Vec::new();
        let mut batches = Vec::new();
        for (i, it) in its.iter().enumerate() {
            let block = batch_block::encode(&it.batch, &keys).unwrap();
            out.push(("batch_block", format!("iteration{i}"), block.clone()));
            steps.push(step_block::Step::of(it));
            batches.push(block);
        }
        let block = step_block::encode(&steps, &batches);
        out.push(("step_block", "zstd".into(), block.clone()));
        let mut raw = vec![1u8];
        raw.extend(zstd::bulk::decompress(&block[1..], 1 << 20).unwrap());
        out.push(("step_block", "raw".into(), raw));
        out
    }

    /// `UPDATE_SEEDS=1` rewrites `fuzz/seeds/`; otherwise the committed seeds must be these.
    #[test]
    fn the_committed_seeds_are_current() {
        for (target, name, bytes) in fresh_seeds() {
            let path = format!("{SEEDS}/{target}/{name}");
            if std::env::var_os("UPDATE_SEEDS").is_some() {
                std::fs::create_dir_all(format!("{SEEDS}/{target}")).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            } else {
                let committed = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("{path}: {e} (UPDATE_SEEDS=1 writes it)"));
                assert!(
                    committed == bytes,
                    "{path} is stale (UPDATE_SEEDS=1 rewrites it)"
                );
            }
        }
    }

    #[test]
    fn every_target_has_seeds_and_takes_them() {
        for (name, target) in TARGETS {
            let seeds = seeds(name);
            assert!(
                !seeds.is_empty(),
                "fuzz/seeds/{name} is empty (UPDATE_SEEDS=1 fills it)"
            );
            for s in &seeds {
                target(s);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Arbitrary bytes, and seeds with bytes flipped, cut or inserted.
        #[test]
        fn no_decoder_panics_on_any_bytes(
            which in 0..TARGETS.len(),
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            seed_pick in any::<usize>(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), 0..3u8), 0..8),
        ) {
            let (name, target) = TARGETS[which];
            target(&bytes);
            let seeds = seeds(name);
            if !seeds.is_empty() {
                let mut s = seeds[seed_pick % seeds.len()].clone();
                for (at, byte, op) in edits {
                    let at = at % (s.len() + 1);
                    match op {
                        0 if at < s.len() => s[at] = byte,
                        1 => s.insert(at, byte),
                        _ => s.truncate(at),
                    }
                }
                target(&s);
            }
        }
    }
}
