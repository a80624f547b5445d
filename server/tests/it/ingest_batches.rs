//! Batch semantics: duplicates are not stored twice, invalid items are rejected one by one with a
//! message naming the item and field, and the valid rest of the batch is kept.

use crate::common;

use common::*;
use tokenscope::fixtures;

#[tokio::test]
async fn a_resent_request_is_not_stored_twice() {
    let app = spawn_app().await;
    let r = fixtures::request("dup", T0, 20, 3, 1, 1);
    let batch = export(&fixtures::resource("gpu-0"), &[r.clone(), r.clone()], &[]);
    let mut grpc = app.grpc().await;
    let first = grpc.export(batch.clone()).await.unwrap().into_inner();
    assert_eq!(
        (first.accepted_requests, first.duplicate_requests),
        (1, 1),
        "a repeat inside one batch"
    );
    let again = grpc.export(batch).await.unwrap().into_inner();
    assert_eq!((again.accepted_requests, again.duplicate_requests), (0, 2));
    // Same id, later arrival: still the same request on that instance.
    let mut later = r.clone();
    later.arrival_ns += 86_400_000_000_000;
    later.first_token_ns = None;
    later.tokens.clear();
    later.output_tokens = 0;
    later.queued_ns = None;
    later.first_scheduled_ns = None;
    later.prefill_chunks.clear();
    later.finished_ns = later.arrival_ns + 1;
    let third = grpc
        .export(export(&fixtures::resource("gpu-0"), &[later], &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(third.duplicate_requests, 1);

    let list = app.get_json("/api/v1/requests").await;
    assert_eq!(list["requests"].as_array().unwrap().len(), 1);
    // The same id on another instance is another request.
    let other = grpc
        .export(export(&fixtures::resource("gpu-9"), &[r], &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(other.accepted_requests, 1);
    let resp = app.get("/api/v1/requests/dup").await;
    assert_eq!(resp.status(), 409, "ambiguous without ?instance=");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("gpu-0, gpu-9")
            || body["error"].as_str().unwrap().contains("gpu-9, gpu-0")
    );
    assert_eq!(
        app.get_json("/api/v1/requests/dup?instance=gpu-9").await["instance"],
        "gpu-9"
    );
}

#[tokio::test]
async fn one_invalid_item_is_rejected_and_the_rest_is_stored() {
    let app = spawn_app().await;
    let good1 = fixtures::request("good-1", T0, 10, 2, 1, 1);
    let bad = fixtures::request("bad", T0, 10, 2, 20, 2);
    let good2 = fixtures::request("good-2", T0, 10, 2, 40, 3);
    let mut batch = export(&fixtures::resource("gpu-0"), &[good1, bad, good2], &[]);
    // Mismatched column: one emitted time missing.
    batch.resource_traces[0].requests[1]
        .tokens
        .as_mut()
        .unwrap()
        .emitted_ns
        .pop();
    let reply = app
        .grpc()
        .await
        .export(batch.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!((reply.accepted_requests, reply.rejected_requests), (2, 1));
    let rej = &reply.rejections[0];
    assert_eq!(
        rej.item,
        "resource_traces[0].requests[1] (request_id \"bad\")"
    );
    assert_eq!(rej.field, "tokens.emitted_ns");
    assert!(
        rej.message.contains("has 9 elements but token_id has 10"),
        "{}",
        rej.message
    );

    // The same batch as JSON gives the same answer (good ones are duplicates now).
    let resp = app
        .post_json("/api/v1/traces", serde_json::to_string(&batch).unwrap())
        .await;
    assert_eq!(resp.status(), 200);
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["duplicateRequests"], "2");
    assert_eq!(reply["rejectedRequests"], "1");
    assert_eq!(reply["rejections"][0]["field"], "tokens.emitted_ns");

    assert_eq!(app.get("/api/v1/requests/good-2").await.status(), 200);
    assert_eq!(app.get("/api/v1/requests/bad").await.status(), 404);
}

#[tokio::test]
async fn invalid_values_are_named() {
    let app = spawn_app().await;
    let mut grpc = app.grpc().await;
    type Breaker = Box<dyn Fn(&mut tokenscope_proto::v1::Request)>;
    let cases: Vec<(&str, Breaker)> = vec![
        ("arrival_ns", Box::new(|r| r.arrival_ns = 1_796_022_000)), // seconds sent as nanoseconds
        ("request_id", Box::new(|r| r.request_id.clear())),
        (
            "finished_ns",
            Box::new(|r| r.finished_ns = r.arrival_ns - 1),
        ),
        ("trace_id", Box::new(|r| r.trace_id = vec![1, 2, 3])),
        (
            "tokens.candidate_logprob",
            Box::new(|r| {
                r.tokens.as_mut().unwrap().candidate_logprob.pop();
            }),
        ),
        (
            "tokens.candidates[0][1].logprob",
            Box::new(|r| r.tokens.as_mut().unwrap().candidate_logprob[1] = 0.0),
        ),
        ("output_tokens", Box::new(|r| r.output_tokens = 3)),
        ("tenant", Box::new(|r| r.tenant = "t".repeat(300))),
        (
            "prefix_cache.block_hashes",
            Box::new(|r| {
                r.prefix_cache = Some(tokenscope_proto::v1::PrefixCache {
                    block_hashes: vec![7; 65],
                    blocks: 65,
                    ..Default::default()
                })
            }),
        ),
        (
            "tokens.iteration_id",
            Box::new(|r| {
                let t = r.tokens.as_mut().unwrap();
                t.iteration_id_fixed = t.iteration_id.clone();
            }),
        ),
        (
            "prefix_cache",
            Box::new(|r| {
                r.prefix_cache = Some(tokenscope_proto::v1::PrefixCache {
                    gpu_tokens: r.prompt_tokens + 1,
                    ..Default::default()
                })
            }),
        ),
    ];
    for (field, break_it) in cases {
        let good = fixtures::request("ok", T0, 5, 2, 1, 1);
        let mut batch = export(&fixtures::resource("gpu-0"), &[good.clone(), good], &[]);
        batch.resource_traces[0].requests[1].request_id = "broken".into();
        break_it(&mut batch.resource_traces[0].requests[1]);
        let reply = grpc.export(batch).await.unwrap().into_inner();
        assert_eq!(reply.rejected_requests, 1, "{field}");
        assert_eq!(reply.rejections[0].field, field);
        assert!(!reply.rejections[0].message.is_empty());
    }
}

/// The engines' Python exporters write the long token columns at a fixed width (numpy's
/// `tobytes`): the request stored is the one sent as varints.
#[tokio::test]
async fn fixed_width_columns_are_the_same_columns() {
    let app = spawn_app().await;
    let r = fixtures::request("varints", T0, 12, 3, 1, 7);
    let mut fixed = r.clone();
    fixed.request_id = "fixed".into();
    let mut batch = export(&fixtures::resource("gpu-0"), &[r, fixed], &[]);
    let t = batch.resource_traces[0].requests[1]
        .tokens
        .as_mut()
        .unwrap();
    assert!(
        !t.scheduled_ns.is_empty() && !t.candidate_token_id.is_empty(),
        "the fixture has every column"
    );
    t.token_id_fixed = std::mem::take(&mut t.token_id);
    t.emitted_ns_fixed = std::mem::take(&mut t.emitted_ns);
    t.iteration_id_fixed = std::mem::take(&mut t.iteration_id);
    t.scheduled_ns_fixed = std::mem::take(&mut t.scheduled_ns);
    t.candidate_token_id_fixed = std::mem::take(&mut t.candidate_token_id);
    let reply = app.grpc().await.export(batch).await.unwrap().into_inner();
    assert_eq!(reply.accepted_requests, 2, "{:?}", reply.rejections);
    let tokens = |id: &'static str| {
        let app = &app;
        async move { app.get_json(&format!("/api/v1/requests/{id}")).await["tokens"].clone() }
    };
    let (varints, fixed) = (tokens("varints").await, tokens("fixed").await);
    assert_eq!(varints.as_array().map(Vec::len), Some(12));
    assert_eq!(varints, fixed);
}

#[tokio::test]
async fn a_batch_with_nothing_valid_is_an_error() {
    let app = spawn_app().await;
    let mut r = fixtures::request("x", T0, 5, 2, 1, 1);
    r.finished_ns = r.arrival_ns - 1;
    let mut batch = export(&fixtures::resource("gpu-0"), &[], &[]);
    batch.resource_traces[0].requests.push(
        tokenscope_proto::wire::to_wire(&fixtures::resource("g"), &[r], &[])
            .requests
            .remove(0),
    );
    let status = app.grpc().await.export(batch.clone()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("finished_ns"),
        "{}",
        status.message()
    );

    let resp = app
        .post_json("/api/v1/traces", serde_json::to_string(&batch).unwrap())
        .await;
    assert_eq!(resp.status(), 400);
    let resp = app
        .post_json("/api/v1/traces", "{\"resource_traces\": 7}")
        .await;
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("not a valid tokenscope.v1.ExportRequest")
    );
    // A resource without an instance id rejects its items, naming the resource field.
    let mut batch = export(
        &fixtures::resource(""),
        &[fixtures::request("y", T0, 5, 2, 1, 1)],
        &[],
    );
    batch.resource_traces[0].resource.as_mut().unwrap().model = "m".into();
    let status = app.grpc().await.export(batch).await.unwrap_err();
    assert!(
        status.message().contains("resource.instance_id"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn bytes_that_are_not_protobuf_are_refused_by_name() {
    let app = spawn_app().await;
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", app.running.grpc_addr))
            .unwrap()
            .connect_lazy();
    // Field 1 (resource_traces), length-delimited, claiming 127 bytes of which 2 follow.
    let body = tonic::codegen::Bytes::from_static(b"\x0a\x7f\x0a\x00");
    let status = tokenscope_sim::encoded::export(channel, body)
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("not valid protobuf"),
        "{}",
        status.message()
    );
    assert!(
        app.get("/readyz").await.status().is_success(),
        "the server still serves"
    );
}
