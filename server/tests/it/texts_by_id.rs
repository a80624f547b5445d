//! Token texts by id (`ResourceTraces.token_texts`): an exporter sends each id's text once, and
//! what is read back is what a text with every token would have given.

use std::collections::HashSet;

use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokenscope_core::api::RequestDetail;
use tokenscope_core::model::RequestTrace;

use crate::common::*;
use tokenscope::fixtures;
use tokenscope_proto::v1;
use tokenscope_proto::wire::{intern_texts, to_wire};

/// An export of `requests` with texts by id, leaving out the texts of the ids in `sent`; and the
/// ids whose texts it carries.
fn by_id(
    instance: &str,
    requests: &[RequestTrace],
    sent: &HashSet<u32>,
) -> (v1::ExportRequest, Vec<u32>) {
    let mut traces = to_wire(&fixtures::resource(instance), requests, &[]);
    let carried = intern_texts(&mut traces, sent);
    for r in &traces.requests {
        let c = r.tokens.as_ref().unwrap();
        assert!(
            c.text.is_empty() && c.candidate_text.is_empty(),
            "no text with a token"
        );
    }
    let export = v1::ExportRequest {
        resource_traces: vec![traces],
    };
    (export, carried)
}

/// Token and candidate texts of a request as read back, in order.
async fn texts_read(app: &TestApp, request_id: &str) -> Vec<Option<String>> {
    let detail: RequestDetail = serde_json::from_value(
        app.get_json(&format!("/api/v1/requests/{request_id}"))
            .await,
    )
    .unwrap();
    detail
        .tokens
        .iter()
        .flat_map(|t| {
            std::iter::once(t.text.clone()).chain(t.candidates.iter().map(|c| c.text.clone()))
        })
        .collect()
}

/// The distinct ids of a request's tokens and candidates.
fn ids_of(r: &RequestTrace) -> HashSet<u32> {
    (r.tokens.iter())
        .flat_map(|t| {
            t.token_id
                .into_iter()
                .chain(t.candidates.iter().filter_map(|c| c.token_id))
        })
        .collect()
}

fn texts_sent(r: &RequestTrace) -> Vec<Option<String>> {
    r.tokens
        .iter()
        .flat_map(|t| {
            std::iter::once(t.text.clone()).chain(t.candidates.iter().map(|c| c.text.clone()))
        })
        .collect()
}

#[tokio::test]
async fn texts_by_id_read_back_as_sent_and_later_exports_leave_them_out() {
    let a = spawn_app().await;
    // A second replica on the same database, its vocabulary cache cold.
    let b = spawn_on(a.database_url.clone(), |_| {}).await;
    let first = fixtures::request("first", T0, 60, 4, 1, 11);
    let (export, carried) = by_id("gpu-0", std::slice::from_ref(&first), &HashSet::new());
    assert_eq!(carried.len(), ids_of(&first).len(), "each id's text once");
    let reply = a.grpc().await.export(export).await.unwrap().into_inner();
    assert_eq!((reply.accepted_requests, reply.texts_missing), (1, 0));
    assert_eq!(texts_read(&a, "first").await, texts_sent(&first));

    // The same tokens again, their texts left out: to the replica that stored them and to the
    // other one.
    let sent: HashSet<u32> = carried.into_iter().collect();
    for (app, id) in [(&a, "again-a"), (&b, "again-b")] {
        let mut again = first.clone();
        again.request_id = id.into();
        let (export, carried) = by_id("gpu-0", std::slice::from_ref(&again), &sent);
        assert!(carried.is_empty());
        assert!(
            export.resource_traces[0]
                .token_texts
                .as_ref()
                .unwrap()
                .text
                .is_empty()
        );
        let reply = app.grpc().await.export(export).await.unwrap().into_inner();
        assert_eq!(
            (reply.accepted_requests, reply.texts_missing),
            (1, 0),
            "{id}"
        );
        assert_eq!(texts_read(app, id).await, texts_sent(&first), "{id}");
    }
}

#[tokio::test]
async fn texts_the_server_lacks_are_reported_and_show_once_they_are_sent() {
    let app = spawn_app().await;
    let lost = fixtures::request("lost", T0, 30, 3, 1, 21);
    let ids = ids_of(&lost);
    // The exporter believes the server has every text (say its database was replaced).
    let (export, _) = by_id("gpu-0", std::slice::from_ref(&lost), &ids);
    let reply = app.grpc().await.export(export).await.unwrap().into_inner();
    assert_eq!(
        reply.accepted_requests, 1,
        "the request is stored all the same"
    );
    assert_eq!(reply.texts_missing as usize, ids.len());
    assert!(texts_read(&app, "lost").await.iter().all(Option::is_none));

    // The exporter sends the texts again; the request stored without them now shows them.
    let mut resent = lost.clone();
    resent.request_id = "resent".into();
    let (export, _) = by_id("gpu-0", &[resent], &HashSet::new());
    let reply = app.grpc().await.export(export).await.unwrap().into_inner();
    assert_eq!((reply.accepted_requests, reply.texts_missing), (1, 0));
    assert_eq!(texts_read(&app, "lost").await, texts_sent(&lost));
    assert_eq!(texts_read(&app, "resent").await, texts_sent(&lost));
}

#[tokio::test]
async fn a_text_by_id_unlike_the_stored_one_is_kept_with_its_tokens() {
    let app = spawn_app().await;
    let first = fixtures::request("first", T0, 40, 3, 1, 7);
    let batch = export(
        &fixtures::resource("gpu-a"),
        std::slice::from_ref(&first),
        &[],
    );
    app.grpc().await.export(batch).await.unwrap();
    // Another engine of the same model decodes every token differently.
    let mut second = fixtures::request("second", T0 + 1_000_000, 40, 3, 1, 7);
    decoded_differently(&mut second);
    let (export, _) = by_id("gpu-b", std::slice::from_ref(&second), &HashSet::new());
    let reply = app.grpc().await.export(export).await.unwrap().into_inner();
    assert_eq!((reply.accepted_requests, reply.texts_missing), (1, 0));

    assert_eq!(texts_read(&app, "second").await, texts_sent(&second));
    assert_eq!(texts_read(&app, "first").await, texts_sent(&first));
    let mut db = PgConnection::connect(&app.database_url).await.unwrap();
    let tilde: i64 = sqlx::query_scalar("SELECT count(*) FROM vocab WHERE text LIKE '~%'")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(tilde, 0, "the vocabulary keeps the first texts");
}

#[tokio::test]
async fn malformed_texts_by_id_refuse_the_resource_and_say_why() {
    let app = spawn_app().await;
    let r = fixtures::request("r", T0, 10, 2, 1, 3);
    type Spoil = fn(&mut v1::TokenTexts);
    let cases: [(&str, Spoil, &str); 3] = [
        (
            "token_texts.text",
            |t| {
                t.text.pop();
            },
            "one text per id",
        ),
        (
            "token_texts.token_id[0]",
            |t| t.token_id[0] = u32::MAX,
            "unknown id",
        ),
        (
            "token_texts.text[1]",
            |t| {
                t.token_id[1] = t.token_id[0];
                t.text[1] = format!("{}!", t.text[0]);
            },
            "second, different text",
        ),
    ];
    for (field, spoil, says) in cases {
        let (mut export, _) = by_id("gpu-0", std::slice::from_ref(&r), &HashSet::new());
        spoil(export.resource_traces[0].token_texts.as_mut().unwrap());
        let status = app.grpc().await.export(export).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains(field),
            "{field}: {}",
            status.message()
        );
        assert!(
            status.message().contains(says),
            "{says}: {}",
            status.message()
        );
    }
    // The same id twice with one text is accepted, once.
    let (mut export, _) = by_id("gpu-0", std::slice::from_ref(&r), &HashSet::new());
    let t = export.resource_traces[0].token_texts.as_mut().unwrap();
    t.token_id.push(t.token_id[0]);
    t.text.push(t.text[0].clone());
    let reply = app.grpc().await.export(export).await.unwrap().into_inner();
    assert_eq!(reply.accepted_requests, 1);
    assert_eq!(texts_read(&app, "r").await, texts_sent(&r));
}

#[tokio::test]
async fn hand_written_json_gives_texts_by_id() {
    let app = spawn_app().await;
    // Candidates' texts come by id; the chosen tokens' texts are their own, and an id that
    // nothing gives a text for (7) has none.
    let body = r#"{"resource_traces": [{
        "resource": {"engine": "ENGINE_KIND_VLLM", "model": "by-id-json", "instance_id": "node-a"},
        "token_texts": {"token_id": [9906, 13347], "text": ["Hello", "Hi"]},
        "requests": [{
            "request_id": "hello", "arrival_ns": 1796022000000000000,
            "finished_ns": 1796022000090000000, "prompt_tokens": 12,
            "tokens": {"token_id": [9906, 2], "text": ["Hello!", ""],
                       "candidate_count": [2, 1], "candidate_token_id": [13347, 9906, 7],
                       "candidate_logprob": [-0.25, -1.5, -0.1]}
        }]
    }]}"#;
    let resp = app.post_json("/api/v1/traces", body).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let reply: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(reply["textsMissing"], "1", "{reply}");
    let d = app.get_json("/api/v1/requests/hello").await;
    let texts: Vec<_> = d["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let cands: Vec<_> = t["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["text"].clone())
                .collect();
            (t["text"].clone(), cands)
        })
        .collect();
    assert_eq!(
        texts,
        [
            (json!("Hello!"), vec![json!("Hi"), json!("Hello")]),
            (json!(""), vec![serde_json::Value::Null]),
        ]
    );
}
