//! Batch entries that name their request by reference (`BatchEntry.request_ref` into
//! `ResourceTraces.request_ids`) store exactly what the same entries naming it by id store, and
//! a wrong reference refuses its iteration, naming the field.

use sqlx::{Connection, PgConnection};

use crate::common::*;
use tokenscope::fixtures;
use tokenscope::store::batch_block::{self, Who};
use tokenscope_core::model::{BatchEntry, Iteration, Phase};
use tokenscope_proto::v1;
use tokenscope_proto::wire::to_wire;

/// Steps of three requests: the first two prefill in chunks while the third decodes.
fn steps() -> Vec<Iteration> {
    let entry = |id: &str, phase, tokens, prefill_offset| BatchEntry {
        request_id: id.into(),
        phase,
        tokens,
        prefill_offset,
        draft: None,
    };
    (0..6u32)
        .map(|k| Iteration {
            iteration_id: 100 + u64::from(k),
            start_ns: T0 + i64::from(k) * 20_000_000,
            end_ns: T0 + i64::from(k) * 20_000_000 + 15_000_000,
            batch: vec![
                entry("cmpl-long-prompt-0", Phase::Prefill, 512, 512 * k),
                entry("cmpl-decoding-0", Phase::Decode, 1, 0),
                entry("cmpl-short-0", Phase::Prefill, 64, 0),
            ]
            .into_iter()
            // A step without the short prompt: references need not follow the table's order.
            .filter(|e| k % 2 == 0 || &*e.request_id != "cmpl-short-0")
            .rev()
            .collect(),
            running: 3,
            waiting: k,
            kv_cache_usage: 0.25,
        })
        .collect()
}

/// `traces` with every batch entry naming its request by id, as before references existed.
fn by_id(mut traces: v1::ResourceTraces) -> v1::ResourceTraces {
    for e in traces.iterations.iter_mut().flat_map(|i| &mut i.batch) {
        e.request_id = traces.request_ids[e.request_ref as usize - 1].clone();
        e.request_ref = 0;
    }
    traces.request_ids.clear();
    traces
}

/// An instance's stored steps: (id, waiting, each entry as (request id, phase, tokens, offset)).
async fn stored(
    db: &mut PgConnection,
    instance: &str,
) -> Vec<(i64, i32, Vec<(String, Phase, u32, u32)>)> {
    let mut rows: Vec<(i64, i32, Vec<u8>)> = stored_steps(db)
        .await
        .into_iter()
        .filter(|(key, _, _)| key == instance)
        .map(|(_, step, batch)| (step.iteration_id, step.waiting, batch))
        .collect();
    rows.sort_by_key(|r| r.0);
    let mut out = Vec::new();
    for (id, waiting, block) in rows {
        let mut entries = Vec::new();
        for e in batch_block::decode(&block).unwrap() {
            let Who::Key(key) = e.who else {
                panic!("entries are stored by key")
            };
            let (name,): (String,) =
                sqlx::query_as("SELECT request_id FROM request_keys WHERE key = $1")
                    .bind(key)
                    .fetch_one(&mut *db)
                    .await
                    .unwrap();
            entries.push((name, e.phase, e.tokens, e.prefill_offset));
        }
        out.push((id, waiting, entries));
    }
    out
}

async fn send(app: &TestApp, traces: v1::ResourceTraces) -> v1::ExportResponse {
    let export = v1::ExportRequest {
        resource_traces: vec![traces],
    };
    app.grpc().await.export(export).await.unwrap().into_inner()
}

#[tokio::test]
async fn entries_by_reference_store_what_entries_by_id_store() {
    let app = spawn_app().await;
    let steps = steps();
    let by_ref = to_wire(&fixtures::resource("by-ref"), &[], &steps);
    // The model → wire adapter sends each id once, however many steps name it.
    assert_eq!(by_ref.request_ids.len(), 3);
    assert!(
        by_ref
            .iterations
            .iter()
            .flat_map(|i| &i.batch)
            .all(|e| e.request_id.is_empty() && e.request_ref > 0)
    );
    let plain = by_id(to_wire(&fixtures::resource("by-id"), &[], &steps));
    for traces in [by_ref, plain] {
        let reply = send(&app, traces).await;
        assert_eq!(
            (reply.accepted_iterations, reply.rejected_iterations),
            (6, 0)
        );
    }
    let mut db = PgConnection::connect(&app.database_url).await.unwrap();
    let by_ref = stored(&mut db, "by-ref").await;
    assert_eq!(by_ref, stored(&mut db, "by-id").await);
    let want: Vec<_> = steps
        .iter()
        .map(|it| {
            let entries = it.batch.iter();
            let entries = entries.map(|e| {
                let id = e.request_id.to_string();
                (id, e.phase, e.tokens, e.prefill_offset)
            });
            (it.iteration_id as i64, it.waiting as i32, entries.collect())
        })
        .collect();
    assert_eq!(by_ref, want);
}

#[tokio::test]
async fn a_wrong_reference_or_draft_count_refuses_its_iteration_and_names_the_field() {
    let app = spawn_app().await;
    let mut traces = to_wire(&fixtures::resource("gpu-0"), &[], &steps());
    traces.iterations[1].batch[0].request_ref = 4;
    traces.iterations[3].batch[1].request_id = "cmpl-decoding-0".into();
    // Step 104's decode entry accepts more drafts than it had; step 105 drafts for a prefill.
    traces.iterations[4].batch[1].draft_tokens = 2;
    traces.iterations[4].batch[1].accepted_tokens = 3;
    traces.iterations[5].batch[1].draft_tokens = 4;
    let reply = send(&app, traces).await;
    assert_eq!(
        (reply.accepted_iterations, reply.rejected_iterations),
        (2, 4),
        "the good steps are stored"
    );
    let got: Vec<_> = reply
        .rejections
        .iter()
        .map(|r| (r.item.as_str(), r.field.as_str(), r.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "resource_traces[0].iterations[1] (iteration_id 101)",
                "batch[0].request_ref",
                "4 is past the 3 ids in the resource's request_ids"
            ),
            (
                "resource_traces[0].iterations[3] (iteration_id 103)",
                "batch[1]",
                "has both request_id and request_ref; set one"
            ),
            (
                "resource_traces[0].iterations[4] (iteration_id 104)",
                "batch[1].accepted_tokens",
                "3 accepted of 2 draft tokens"
            ),
            (
                "resource_traces[0].iterations[5] (iteration_id 105)",
                "batch[1].draft_tokens",
                "draft tokens are verified in a DECODE entry, not a PREFILL one"
            ),
        ]
    );
}

#[tokio::test]
async fn references_work_in_proto3_json() {
    let app = spawn_app().await;
    // What a user types with curl: snake_case names, plain numbers.
    let body = r#"{"resource_traces": [{
        "resource": {"engine": "ENGINE_KIND_VLLM", "model": "m", "instance_id": "json-gpu"},
        "request_ids": ["cmpl-a", "cmpl-b"],
        "iterations": [{
            "iteration_id": 7, "start_ns": 1796022000000000000, "end_ns": 1796022000010000000,
            "batch": [{"request_ref": 2, "phase": "PHASE_PREFILL", "tokens": 128},
                      {"request_ref": 1, "phase": "PHASE_DECODE", "tokens": 1}]
        }]
    }]}"#;
    let resp = app.post_json("/api/v1/traces", body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let mut db = PgConnection::connect(&app.database_url).await.unwrap();
    let entries = &stored(&mut db, "json-gpu").await[0].2;
    assert_eq!(
        entries,
        &[
            ("cmpl-b".to_string(), Phase::Prefill, 128, 0),
            ("cmpl-a".to_string(), Phase::Decode, 1, 0),
        ]
    );
}
