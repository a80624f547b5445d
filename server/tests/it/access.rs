//! Access control over real loopback: ingest keys on every ingest path (native gRPC and JSON,
//! OTLP gRPC and HTTP, imports), each key held to its instances; read access by token (bearer
//! or the browser's sign-in cookie) and by a trusted proxy's header; incident links public only
//! with `--public-incidents`.

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, trace_service_client::TraceServiceClient,
};
use tonic::{Code, metadata::MetadataValue};

use crate::common::*;
use tokenscope::fixtures;
use tokenscope_proto::v1;

const PROD_KEY: &str = "prod-0123456789abcdef";
const CPU_KEY: &str = "cpu-fedcba9876543210";
const READ_TOKEN: &str = "read-00112233445566778899";

/// A key file: `prod` may send for gpu-*, `cpu` for cpu-0 only.
fn key_file() -> TempFile {
    temp_file(&format!(
        "# name key instances\nprod {PROD_KEY} gpu-*\ncpu {CPU_KEY} cpu-0\n"
    ))
}

fn with_key<T>(msg: T, key: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    let value: MetadataValue<_> = format!("Bearer {key}").parse().unwrap();
    req.metadata_mut().insert("authorization", value);
    req
}

/// One request for each of `instances`, in one batch.
fn batch(instances: &[&str], id: &str) -> v1::ExportRequest {
    v1::ExportRequest {
        resource_traces: instances
            .iter()
            .flat_map(|i| {
                let r = fixtures::request(&format!("{id}-{i}"), T0, 8, 5, 1, 1);
                export(&fixtures::resource(i), &[r], &[]).resource_traces
            })
            .collect(),
    }
}

async fn stored_ids(app: &TestApp) -> Vec<String> {
    let list = app.get_json("/api/v1/requests?limit=100").await;
    let mut ids: Vec<String> = list["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn with_ingest_keys_every_ingest_path_needs_a_key_and_a_key_only_its_instances() {
    let keys = key_file();
    let path = keys.0.clone();
    let app = spawn_app_with(move |c| c.access.ingest_keys = Some(path)).await;
    let mut grpc = app.grpc().await;

    // Native gRPC: no key, a wrong key.
    let err = grpc.export(batch(&["gpu-0"], "none")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("Authorization: Bearer"), "{err:?}");
    let wrong = with_key(batch(&["gpu-0"], "wrong"), "prod-0123456789abcdeX");
    let err = grpc.export(wrong).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert_eq!(err.message(), "the ingest key is not valid");

    // A valid key: its instances are stored, the others refused item by item.
    let mixed = with_key(batch(&["gpu-0", "cpu-0", "gpu-1"], "mixed"), PROD_KEY);
    let reply = grpc.export(mixed).await.unwrap().into_inner();
    assert_eq!(reply.accepted_requests, 2);
    assert_eq!(reply.rejected_requests, 1);
    let r = &reply.rejections[0];
    assert_eq!(r.field, "resource.instance_id");
    assert!(
        r.message
            .contains("ingest key \"prod\" may not send for instance \"cpu-0\""),
        "{r:?}"
    );
    assert!(
        !r.message.contains(PROD_KEY),
        "the key itself is never echoed"
    );
    // Nothing the key covers: refused as a whole.
    let err = grpc
        .export(with_key(batch(&["cpu-0"], "only"), PROD_KEY))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let reply = grpc
        .export(with_key(batch(&["cpu-0"], "cpu"), CPU_KEY))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.accepted_requests, 1);

    // Native JSON over HTTP.
    let json = serde_json::to_string(&batch(&["gpu-2"], "http")).unwrap();
    let resp = app.post_json("/api/v1/traces", json.clone()).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let resp = app
        .client
        .post(format!("{}/api/v1/traces", app.http))
        .bearer_auth(PROD_KEY)
        .header("content-type", "application/json")
        .body(json)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());

    // OTLP over HTTP and gRPC.
    let resp = app.post_json("/v1/traces", "{}").await;
    assert_eq!(resp.status(), 401);
    let resp = app
        .client
        .post(format!("{}/v1/traces", app.http))
        .bearer_auth(CPU_KEY)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut otlp = TraceServiceClient::connect(format!("http://{}", app.running.grpc_addr))
        .await
        .unwrap();
    let err = otlp
        .export(ExportTraceServiceRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    otlp.export(with_key(ExportTraceServiceRequest::default(), CPU_KEY))
        .await
        .unwrap();

    // An import (no read access configured: a key is the only way in).
    let file = serde_json::to_string(&batch(&["gpu-3"], "import")).unwrap();
    let import = |key: Option<&str>| {
        let mut req = app
            .client
            .post(format!("{}/api/v1/import?format=native", app.http))
            .body(file.clone());
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        req.send()
    };
    assert_eq!(import(None).await.unwrap().status(), 401);
    let resp = import(Some(CPU_KEY)).await.unwrap();
    assert_eq!(resp.status(), 403, "cpu may not send for gpu-3");
    assert_eq!(import(Some(PROD_KEY)).await.unwrap().status(), 200);

    assert_eq!(
        stored_ids(&app).await,
        [
            "cpu-cpu-0",
            "http-gpu-2",
            "import-gpu-3",
            "mixed-gpu-0",
            "mixed-gpu-1"
        ]
    );
    let m = app.metrics().await;
    assert_eq!(m["tokenscope_ingest_unauthenticated_total"], 6.0);
    assert_eq!(
        m["tokenscope_ingest_rejected_total{source=\"native_grpc\",reason=\"forbidden_instance\"}"],
        2.0
    );
    assert_eq!(
        m["tokenscope_ingest_rejected_total{source=\"import\",reason=\"forbidden_instance\"}"],
        1.0
    );
}

#[tokio::test]
async fn a_wrong_key_file_stops_the_server_at_start_naming_the_line() {
    let keys = temp_file("prod short gpu-*\n");
    let path = keys.0.clone();
    let err = tokenscope::server::start(tokenscope::server::Config {
        access: tokenscope::access::AccessConfig {
            ingest_keys: Some(path),
            ..Default::default()
        },
        ..spawn_config("postgres://unused".into())
    })
    .await
    .err()
    .expect("refused");
    let err = err.to_string();
    assert!(
        err.contains("line 1: the key of \"prod\" is 5 characters"),
        "{err}"
    );
}

#[test]
fn with_a_read_token_pages_and_the_api_need_it_and_ingest_does_not() {
    // It renders the request page: on stacks like the server's (`on_server_stacks`).
    on_server_stacks(read_token_pages_and_api());
}

async fn read_token_pages_and_api() {
    let app = spawn_app_with(|c| c.access.read_token = Some(READ_TOKEN.into())).await;
    // Ingest is not a read: without ingest keys it stays open.
    let reply = app
        .grpc()
        .await
        .export(batch(&["gpu-0"], "r"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.accepted_requests, 1);

    let resp = app.get("/api/v1/requests").await;
    assert_eq!(resp.status(), 401);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("/login"), "{body}");
    let with_bearer = app
        .client
        .get(format!("{}/api/v1/requests", app.http))
        .bearer_auth(READ_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(with_bearer.status(), 200);
    for open in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(app.get(open).await.status(), 200, "{open}");
    }

    // A browser is sent to sign in, and comes back where it was going.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = |cookie: Option<String>| {
        let mut req = no_redirects
            .get(format!("{}/requests/r-gpu-0?instance=gpu-0", app.http))
            .header("accept", "text/html");
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.send()
    };
    let resp = page(None).await.unwrap();
    assert_eq!(resp.status(), 303);
    let next = "/requests/r-gpu-0?instance=gpu-0";
    assert_eq!(
        resp.headers()["location"],
        "/login?next=%2Frequests%2Fr-gpu-0%3Finstance%3Dgpu-0"
    );
    let form = app.get_text("/login?next=%2Frequests%2Fr-gpu-0").await;
    assert!(form.contains("name=\"token\""), "{form}");
    let sign_in = |token: &str| {
        no_redirects
            .post(format!("{}/login", app.http))
            .form(&[("token", token), ("next", next)])
            .send()
    };
    let refused = sign_in("read-wrong-wrong-wrong").await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().get("set-cookie").is_none());
    let signed_in = sign_in(READ_TOKEN).await.unwrap();
    assert_eq!(signed_in.status(), 303);
    assert_eq!(signed_in.headers()["location"], next);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(READ_TOKEN),
        "the cookie holds a digest, not the token"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let resp = page(Some(pair)).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("r-gpu-0"));
}

#[tokio::test]
async fn a_trusted_proxy_header_names_the_reader() {
    let app =
        spawn_app_with(|c| c.access.trusted_user_header = Some("X-Forwarded-User".into())).await;
    let resp = app.get("/api/v1/instances").await;
    assert_eq!(resp.status(), 401);
    let text = resp.text().await.unwrap();
    assert!(text.contains("x-forwarded-user"), "{text}");
    let resp = app
        .client
        .get(format!("{}/api/v1/instances", app.http))
        .header("X-Forwarded-User", "alice@example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// Creates an incident with the read token; its slug.
async fn incident(app: &TestApp) -> String {
    app.grpc()
        .await
        .export(batch(&["gpu-0"], "inc"))
        .await
        .unwrap();
    let body = serde_json::json!({"title": "slow", "instance": "gpu-0", "requests": ["inc-gpu-0"]});
    let resp = app
        .client
        .post(format!("{}/api/v1/incidents", app.http))
        .bearer_auth(READ_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let created: serde_json::Value = resp.json().await.unwrap();
    created["slug"].as_str().unwrap().to_string()
}

#[test]
fn incident_links_are_public_only_when_the_operator_allows_it() {
    on_server_stacks(incident_links_public_only_when_allowed());
}

async fn incident_links_public_only_when_allowed() {
    for public in [false, true] {
        let app = spawn_app_with(move |c| {
            c.access.read_token = Some(READ_TOKEN.into());
            c.access.public_incidents = public;
        })
        .await;
        let slug = incident(&app).await;
        let link = [
            format!("/incidents/{slug}"),
            format!("/incidents/{slug}/preview.svg"),
            format!("/api/v1/incidents/{slug}"),
            format!("/api/v1/incidents/{slug}/markdown"),
        ];
        for path in &link {
            let want = if public { 200 } else { 401 };
            assert_eq!(app.get(path).await.status(), want, "{path} public={public}");
        }
        if public {
            // Someone with only the link is offered no "revoke link"; a reader is.
            let api = format!("/api/v1/incidents/{slug}");
            assert_eq!(app.get_json(&api).await["can_revoke"], false);
            let page = app.get_text(&format!("/incidents/{slug}")).await;
            assert!(page.contains("data-testid=\"incident-title\""), "{page}");
            assert!(!page.contains("incident-revoke"), "{page}");
            let as_reader = |path: String| {
                app.client
                    .get(format!("{}{path}", app.http))
                    .bearer_auth(READ_TOKEN)
                    .send()
            };
            let reply: serde_json::Value = as_reader(api).await.unwrap().json().await.unwrap();
            assert_eq!(reply["can_revoke"], true);
            let page = as_reader(format!("/incidents/{slug}")).await.unwrap();
            assert!(page.text().await.unwrap().contains("incident-revoke"));
        }
        // Never public: the list, revoking, and everything else.
        assert_eq!(app.get("/api/v1/incidents").await.status(), 401);
        assert_eq!(app.get("/api/v1/requests/inc-gpu-0").await.status(), 401);
        let revoke = app
            .client
            .delete(format!("{}/api/v1/incidents/{slug}", app.http))
            .send()
            .await
            .unwrap();
        assert_eq!(revoke.status(), 401);
    }
}

#[tokio::test]
async fn with_keys_and_a_read_token_a_signed_in_reader_may_import() {
    let keys = key_file();
    let path = keys.0.clone();
    let app = spawn_app_with(move |c| {
        c.access.ingest_keys = Some(path);
        c.access.read_token = Some(READ_TOKEN.into());
    })
    .await;
    let file = serde_json::to_string(&batch(&["cpu-9"], "up")).unwrap();
    let post = |token: &str| {
        app.client
            .post(format!("{}/api/v1/import?format=native", app.http))
            .bearer_auth(token)
            .body(file.clone())
            .send()
    };
    assert_eq!(post("nobody-nobody-nobody").await.unwrap().status(), 401);
    // An ingest key is not read access.
    assert_eq!(post(PROD_KEY).await.unwrap().status(), 401);
    let resp = post(READ_TOKEN).await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}
