//! `--redact-text`: no decoded token text reaches the database; ids, times and probabilities do.

use sqlx::{Connection, PgConnection};

use std::collections::HashSet;

use crate::common::*;
use tokenscope::fixtures;
use tokenscope_proto::v1;
use tokenscope_proto::wire::{intern_texts, to_wire};

#[tokio::test]
async fn with_redact_text_no_token_text_is_stored() {
    let app = spawn_app_with(|c| c.redact_text = true).await;
    let sent = fixtures::request("secret", T0, 40, 5, 1, 1);
    assert!(
        sent.tokens.iter().all(|t| t.text.is_some()),
        "texts were sent"
    );
    let batch = export(
        &fixtures::resource("gpu-0"),
        std::slice::from_ref(&sent),
        &[],
    );
    let reply = app.grpc().await.export(batch).await.unwrap().into_inner();
    assert_eq!(reply.accepted_requests, 1);
    // And with texts by id, as tokenscope's exporters send them.
    let mut by_id = sent.clone();
    by_id.request_id = "secret-by-id".into();
    let mut traces = to_wire(&fixtures::resource("gpu-0"), &[by_id], &[]);
    intern_texts(&mut traces, &HashSet::new());
    let batch = v1::ExportRequest {
        resource_traces: vec![traces],
    };
    let reply = app.grpc().await.export(batch).await.unwrap().into_inner();
    assert_eq!((reply.accepted_requests, reply.texts_missing), (1, 0));

    let mut db = PgConnection::connect(&app.database_url).await.unwrap();
    let vocab: i64 = sqlx::query_scalar("SELECT count(*) FROM vocab")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(vocab, 0, "no text in the vocabulary");
    // Nor inline in the token block: none of the texts sent appears in its (decompressed) form,
    // which the API reads back.
    for id in ["secret", "secret-by-id"] {
        let d = app.get_json(&format!("/api/v1/requests/{id}")).await;
        let tokens = d["tokens"].as_array().unwrap();
        assert_eq!(tokens.len(), 40);
        for (t, s) in tokens.iter().zip(&sent.tokens) {
            assert!(t["text"].is_null(), "{t}");
            assert_eq!(t["token_id"], s.token_id.unwrap());
            assert!(t["logprob"].is_number(), "probabilities are kept: {t}");
            assert!(t["emitted_ns"].is_number(), "times are kept: {t}");
            let cands = t["candidates"].as_array().unwrap();
            assert_eq!(cands.len(), 5);
            assert!(
                cands
                    .iter()
                    .all(|c| c["text"].is_null() && c["token_id"].is_number())
            );
        }
    }

    // Without the flag the same request keeps its texts (the test above can fail).
    let plain = spawn_app().await;
    let batch = export(&fixtures::resource("gpu-0"), &[sent], &[]);
    plain.grpc().await.export(batch).await.unwrap();
    let d = plain.get_json("/api/v1/requests/secret").await;
    assert!(d["tokens"][0]["text"].is_string());
}
