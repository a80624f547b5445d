//! Readers scoped to tenants: a token bound to tenant acme sees acme's requests only, in every
//! list, chart and export; sees that another tenant's prompt stalled its request (the culprit
//! under an alias, with its share); and no byte it receives names the other tenant's requests
//! (ids, trace ids, the tenant). Routes that do not narrow to the reader are refused. A proxy
//! naming the user's tenants scopes the same way; an unscoped token sees both tenants.

use std::collections::BTreeSet;

use crate::common;

use common::process::ServerProcess;
use common::*;
use tokenscope_sim::scenarios;

const ACME: &str = "acme-reader-token-0001";
const SRE: &str = "sre-reader-token-00001";

#[test]
fn a_reader_scoped_to_a_tenant_sees_its_own_and_others_only_as_aliases() {
    on_server_stacks(scoped_reader());
}

async fn scoped_reader() {
    let tokens = temp_file(&format!("acme-reader {ACME} acme\nsre {SRE} *\n"));
    let path = tokens.0.clone();
    let app = spawn_app_with(move |c| {
        c.access.read_tokens = Some(path);
        // Latency histograms by tenant, for a reader who sees all.
        c.metrics_tenants = 8;
    })
    .await;

    // What the engine did: a long prompt (globex's) interrupted the victims' decode (acme's).
    let mut s = scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    let victims: BTreeSet<String> = s.truth.victims.iter().cloned().collect();
    for run in &mut s.runs {
        for r in &mut run.output.requests {
            let acme = victims.contains(&r.request_id);
            r.served.tenant = Some(if acme { "acme" } else { "globex" }.into());
            if !acme {
                plant_words(r);
            }
        }
    }
    app.send_sim(&s.runs).await;
    let theirs: Vec<String> = s
        .runs
        .iter()
        .flat_map(|r| &r.output.requests)
        .filter(|r| !victims.contains(&r.request_id))
        .flat_map(|r| [Some(r.request_id.clone()), r.trace_id.clone()])
        .flatten()
        .collect();
    assert!(!s.truth.culprits.is_empty() && theirs.len() > s.truth.culprits.len());
    let victim = s.truth.victims[0].clone();
    let instance = s.truth.instance.clone();

    let get = |token: &'static str, path: String| {
        let req = app
            .client
            .get(format!("{}{path}", app.http))
            .bearer_auth(token)
            .header("accept", "text/html,application/json");
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };

    // Every route a scoped reader may use, and what each must show.
    let q = format!("instance={instance}");
    let window = format!("from={}&to={}", T0 - 60_000_000_000, T0 + 3_600_000_000_000);
    let open = [
        "/".to_string(),
        format!("/?{q}"),
        format!("/usage?{q}&{window}"),
        format!("/requests/{victim}?{q}"),
        format!("/waterfall?{q}&{window}"),
        format!("/api/v1/waterfall?{q}&{window}&width_px=4000"),
        format!("/compare?a_{q}&b_{q}&span_s=7200"),
        format!("/api/v1/compare?a_{q}&b_{q}&span_s=7200"),
        format!("/api/v1/requests?{window}&limit=1000"),
        format!("/api/v1/requests?{window}&tenant=globex"),
        format!("/api/v1/requests?find={}", s.truth.culprits[0]),
        format!("/api/v1/diagnosis?{window}"),
        format!("/api/v1/diagnosis?{window}&ttft_ms=1&tpot_ms=1"),
        format!("/api/v1/latency?{window}"),
        format!("/api/v1/usage?{window}"),
        format!("/api/v1/usage?{window}&by=model&format=csv"),
        "/api/v1/instances".to_string(),
        "/api/v1/me".to_string(),
        format!("/api/v1/requests/{victim}?{q}"),
        format!("/api/v1/requests/{victim}/diagnosis?{q}"),
        format!("/api/v1/requests/{victim}/victims?{q}"),
        format!("/api/v1/requests/{victim}/tokens.csv?{q}"),
        format!("/api/v1/requests/{victim}/trace.json?{q}"),
    ];
    // Not one byte names the other tenant's requests, or the tenant, or holds its words.
    let leaks = |path: &str, body: &str| {
        for id in &theirs {
            assert!(!mentions(body, id), "{path} shows {id} to the acme reader");
        }
        assert!(!body.contains("globex"), "{path} names the other tenant");
        assert!(
            !body.contains(SECRET),
            "{path} holds the other tenant's words"
        );
    };
    for path in &open {
        let (status, body) = get(ACME, path.clone()).await;
        assert_eq!(status, 200, "{path}: {body}");
        leaks(path, &body);
    }
    // Who reads: the reader's own tenants; an unscoped reader, every tenant.
    assert_eq!(
        get(ACME, "/api/v1/me".into()).await.1,
        r#"{"tenants":["acme"]}"#
    );
    assert_eq!(get(SRE, "/api/v1/me".into()).await.1, r#"{"tenants":null}"#);
    // The live stream (it never ends, so its first event): instances and times only.
    let mut live = app
        .client
        .get(format!("{}/api/v1/live?{q}", app.http))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), live.chunk())
        .await
        .expect("the stream says ready")
        .unwrap()
        .unwrap();
    let first = std::str::from_utf8(&first).unwrap();
    assert!(first.starts_with("event: ready"), "{first}");
    leaks("/api/v1/live", first);
    drop(live);
    // Refused: what does not narrow to the reader, and the other tenant's requests.
    let refused = [
        (403, "/api/v1/alerts/alertmanager".to_string()),
        (404, format!("/api/v1/requests/{}?{q}", s.truth.culprits[0])),
        (
            404,
            format!("/api/v1/requests/{}/diagnosis?{q}", s.truth.culprits[0]),
        ),
        (
            404,
            format!("/api/v1/requests/{}/tokens.csv?{q}", s.truth.culprits[0]),
        ),
    ];
    for (want, path) in &refused {
        let (status, body) = get(ACME, path.clone()).await;
        assert_eq!(status, *want, "{path}: {body}");
        // A "not found" repeats the id asked for, nothing else.
        if *want == 403 {
            leaks(path, &body);
        }
    }
    // The other tenant's request page says it does not exist (echoing only the id asked for).
    let (_, page) = get(ACME, format!("/requests/{}?{q}", s.truth.culprits[0])).await;
    assert!(page.contains("no request"), "{page}");
    assert!(!page.contains("globex") && !page.contains("prompt_tokens"));
    // Incidents: the reader freezes its own request; the incident holds only what it may see.
    let create = |token: &'static str, id: String| {
        let req = app
            .client
            .post(format!("{}/api/v1/incidents", app.http))
            .bearer_auth(token)
            .json(&serde_json::json!({"title": "slow answer", "instance": instance, "requests": [id]}));
        async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap();
            (
                status,
                body["slug"].as_str().unwrap_or_default().to_string(),
            )
        }
    };
    let (status, mine) = create(ACME, victim.clone()).await;
    assert_eq!(status, 201);
    assert_eq!(
        create(ACME, s.truth.culprits[0].clone()).await.0,
        404,
        "not its request"
    );
    for path in [
        format!("/api/v1/incidents/{mine}"),
        format!("/api/v1/incidents/{mine}/markdown"),
        format!("/incidents/{mine}/preview.svg"),
        format!("/incidents/{mine}"),
        "/api/v1/incidents".to_string(),
        "/incidents".to_string(),
    ] {
        let (status, body) = get(ACME, path.clone()).await;
        assert_eq!(status, 200, "{path}: {body}");
        leaks(&path, &body);
        assert!(body.contains(&mine) || path.ends_with(".svg"), "{path}");
    }
    let (_, incident) = get(ACME, format!("/api/v1/incidents/{mine}")).await;
    assert!(
        incident.contains("another tenant's request"),
        "the culprits, aliased"
    );
    // One made by an unscoped reader may hold any tenant: the scoped reader does not find it.
    let (status, sre_made) = create(SRE, victim.clone()).await;
    assert_eq!(status, 201);
    assert_eq!(
        get(ACME, format!("/api/v1/incidents/{sre_made}")).await.0,
        404
    );
    assert_eq!(
        get(ACME, format!("/incidents/{sre_made}/preview.png"))
            .await
            .0,
        404
    );
    assert!(
        !get(ACME, "/api/v1/incidents".into())
            .await
            .1
            .contains(&sre_made)
    );
    let (_, all) = get(SRE, "/api/v1/incidents".into()).await;
    assert!(all.contains(&sre_made) && all.contains(&mine));
    let (_, theirs_view) = get(SRE, format!("/api/v1/incidents/{sre_made}")).await;
    assert!(
        mentions(&theirs_view, &s.truth.culprits[0]),
        "unscoped: culprits by id"
    );

    // Its own: every acme request listed, nothing else.
    let (_, list) = get(ACME, format!("/api/v1/requests?{window}&limit=1000")).await;
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let listed: BTreeSet<String> = list["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, victims);

    // What the other tenant did to it: the stall, the culprit under an alias, its share.
    let (_, d) = get(ACME, format!("/api/v1/requests/{victim}/diagnosis?{q}")).await;
    let d: serde_json::Value = serde_json::from_str(&d).unwrap();
    assert_eq!(d["verdict"], "degraded", "{d}");
    let f = d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cause"] == "prefill_interrupted_decode")
        .unwrap_or_else(|| panic!("{d}"));
    let culprit = f["culprits"][0].as_str().unwrap();
    assert!(
        culprit.starts_with("another tenant's request "),
        "{culprit}"
    );
    assert!(f["summary"].as_str().unwrap().contains(culprit), "{f}");
    let share = &f["evidence"]["culprits"][0];
    assert_eq!(share["request_id"], culprit, "{f}");
    assert!(share["held_ms"].as_f64().unwrap() > 0.0, "{f}");
    // The same alias in every reply for this reader.
    let (_, page) = get(ACME, format!("/api/v1/requests/{victim}?{q}")).await;
    assert!(!mentions(&page, &s.truth.culprits[0]));
    // The window's listing: its own degraded requests, the same culprit under the same alias.
    let (_, listing) = get(ACME, format!("/api/v1/diagnosis?{window}")).await;
    let listing: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let listed: BTreeSet<String> = listing["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request_id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        listed.contains(&victim) && listed.is_subset(&victims),
        "{listed:?}"
    );
    assert!(listing.to_string().contains(culprit), "{listing}");
    // An unscoped reader's listing names the culprit by its id (and has the words there were).
    let (_, sre_listing) = get(SRE, format!("/api/v1/diagnosis?{window}")).await;
    assert!(
        mentions(&sre_listing, &s.truth.culprits[0]),
        "{sre_listing}"
    );
    let culprit_csv = get(
        SRE,
        format!("/api/v1/requests/{}/tokens.csv?{q}", s.truth.culprits[0]),
    )
    .await
    .1;
    assert!(culprit_csv.contains(SECRET), "the planted words are stored");

    // Compare counts its own requests only.
    let (_, c) = get(ACME, format!("/api/v1/compare?a_{q}&b_{q}&span_s=7200")).await;
    let c: serde_json::Value = serde_json::from_str(&c).unwrap();
    assert_eq!(c["b"]["requests"], victims.len(), "{}", c["b"]);

    // The waterfall: every track, the other tenant's under aliases with their timing and size.
    let (_, w) = get(
        ACME,
        format!("/api/v1/waterfall?{q}&{window}&width_px=4000"),
    )
    .await;
    let w: serde_json::Value = serde_json::from_str(&w).unwrap();
    let tracks = w["tracks"].as_array().unwrap();
    let all: usize = s
        .runs
        .iter()
        .filter(|r| r.resource.instance_id == instance)
        .map(|r| r.output.requests.len())
        .sum();
    assert_eq!(
        tracks.len(),
        all,
        "every request of the window has its track"
    );
    let aliased: Vec<_> = tracks
        .iter()
        .filter(|t| {
            t["request_id"]
                .as_str()
                .unwrap()
                .starts_with("another tenant's request ")
        })
        .collect();
    assert_eq!(aliased.len(), all - victims.len());
    assert!(
        aliased
            .iter()
            .all(|t| t["prompt_tokens"].as_u64().unwrap() > 0 && t.get("tenant").is_none())
    );
    assert!(
        aliased.iter().any(|t| t["request_id"] == culprit),
        "the diagnosis's alias is the track's"
    );

    // `/metrics` is open, but its exemplars (request ids) and tenant labels only go to a reader
    // who sees all.
    let om = |token: Option<&'static str>| {
        let mut req = app
            .client
            .get(format!("{}/metrics", app.http))
            .header("accept", "application/openmetrics-text; version=1.0.0");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let r = req.send().await.unwrap();
            let kind = r.headers()["content-type"].to_str().unwrap().to_string();
            (kind, r.text().await.unwrap())
        }
    };
    let (kind, body) = om(Some(SRE)).await;
    assert!(kind.starts_with("application/openmetrics-text"));
    assert!(body.contains("tenant=\"globex\""), "{body}");
    for token in [Some(ACME), None] {
        let (kind, body) = om(token).await;
        assert!(kind.starts_with("text/plain"));
        assert!(
            !body.contains("tenant=") && !body.contains("globex"),
            "{body}"
        );
        assert!(body.contains("tokenscope_request_ttft_seconds_count{instance="));
    }

    // An unscoped reader sees both tenants and the culprit by its id.
    let (status, all) = get(SRE, format!("/api/v1/requests?{window}&limit=1000")).await;
    assert_eq!(status, 200);
    assert!(all.contains("globex") && all.contains(&s.truth.culprits[0]));
    let (_, d) = get(SRE, format!("/api/v1/requests/{victim}/diagnosis?{q}")).await;
    assert!(d.contains(&s.truth.culprits[0]), "{d}");
    assert_eq!(get(SRE, format!("/compare?a_{q}")).await.0, 200);
}

/// What only the other tenant's answers say.
const SECRET: &str = "Zanzibar-globex-only";

/// Gives a request's answer words no other tenant's answer has (the simulator draws every
/// tenant's words from one vocabulary, so a search for its own would find the reader's too).
fn plant_words(r: &mut tokenscope_core::model::RequestTrace) {
    for (i, t) in r.tokens.iter_mut().enumerate() {
        t.text = Some(format!(" {SECRET}{i}"));
        t.token_id = None;
        for c in &mut t.candidates {
            c.text = Some(format!(" {SECRET}c{i}"));
            c.token_id = None;
        }
    }
}

/// Whether `body` holds `id` as a whole word (an instance `sim-pid-control` does not mention
/// the request `pid-control`).
fn mentions(body: &str, id: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
    body.match_indices(id).any(|(at, _)| {
        !word(body[..at].chars().next_back()) && !word(body[at + id.len()..].chars().next())
    })
}

#[tokio::test]
async fn a_proxy_names_the_users_tenants_and_a_user_without_them_sees_none() {
    let app = spawn_app_with(|c| {
        c.access.trusted_user_header = Some("x-forwarded-user".into());
        c.access.trusted_tenants_header = Some("x-forwarded-tenants".into());
    })
    .await;
    let mut s = scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    for run in &mut s.runs {
        for r in &mut run.output.requests {
            let acme = s.truth.victims.contains(&r.request_id);
            r.served.tenant = Some(if acme { "acme" } else { "globex" }.into());
        }
    }
    app.send_sim(&s.runs).await;
    let count = |tenants: Option<&'static str>| {
        let mut req = app
            .client
            .get(format!("{}/api/v1/requests?limit=1000", app.http))
            .header("x-forwarded-user", "ana");
        if let Some(t) = tenants {
            req = req.header("x-forwarded-tenants", t);
        }
        async move {
            let v: serde_json::Value = req.send().await.unwrap().json().await.unwrap();
            v["total"].as_u64().unwrap()
        }
    };
    let all: usize = s.runs.iter().map(|r| r.output.requests.len()).sum();
    assert_eq!(count(Some("acme")).await, s.truth.victims.len() as u64);
    assert_eq!(count(Some("*")).await, all as u64);
    assert_eq!(count(Some("acme,globex")).await, all as u64);
    assert_eq!(count(None).await, 0, "no tenants named: none seen");
}

/// Replicas behind one load balancer, and the next run, show a viewer the same alias for the same
/// request: the salt is the database's, not the process's.
#[tokio::test]
async fn aliases_agree_across_servers_and_restarts() {
    let db = fresh_database().await;
    let tokens = temp_file(&format!("acme-reader {ACME} acme\n"));
    let args = ["--read-tokens", tokens.0.to_str().unwrap()];
    let mut one = ServerProcess::start(&db, &args).await;
    let two = ServerProcess::start(&db, &args).await;
    let mut s = scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    for run in &mut s.runs {
        for r in &mut run.output.requests {
            let acme = s.truth.victims.contains(&r.request_id);
            r.served.tenant = Some(if acme { "acme" } else { "globex" }.into());
        }
    }
    tokenscope_sim::deliver::send(
        &one.grpc_url(),
        tokenscope_sim::deliver::batches(&s.runs),
        f64::INFINITY,
        false,
    )
    .await
    .unwrap();
    let path = format!(
        "/api/v1/requests/{}/diagnosis?instance={}",
        s.truth.victims[0], s.truth.instance
    );
    let culprits = |port: u16| {
        let url = format!("http://127.0.0.1:{port}{path}");
        async move {
            let d: serde_json::Value = reqwest::Client::new()
                .get(url)
                .bearer_auth(ACME)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let named: Vec<String> = d["findings"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|f| f["culprits"].as_array().unwrap().clone())
                .map(|c| c.as_str().unwrap().to_string())
                .collect();
            assert!(
                named
                    .iter()
                    .any(|c| c.starts_with("another tenant's request ")),
                "{d}"
            );
            named
        }
    };
    let first = culprits(one.http_port).await;
    assert_eq!(culprits(two.http_port).await, first, "another replica");
    one.kill9();
    one.restart().await;
    assert_eq!(culprits(one.http_port).await, first, "after a restart");
}

/// Prompt families for a scoped reader: its own requests' families, and the requests whose
/// prefills evicted a family's blocks named by alias when another tenant sent them (the storm's
/// long prompts, here globex's). The unscoped reader sees them by name, so the check can fail.
#[tokio::test]
async fn a_scoped_reader_sees_its_families_and_others_evictions_by_alias() {
    let tokens = temp_file(&format!("acme-reader {ACME} acme\nsre {SRE} *\n"));
    let path = tokens.0.clone();
    let app = spawn_app_with(move |c| c.access.read_tokens = Some(path)).await;
    let (mut runs, truth) = tokenscope_sim::families::families(T0, 1);
    for r in runs.iter_mut().flat_map(|r| &mut r.output.requests) {
        let storm = truth.storm.contains(&r.request_id);
        r.served.tenant = Some(if storm { "globex" } else { "acme" }.into());
    }
    app.send_sim(&runs).await;
    let q = format!(
        "/api/v1/fingerprints?from={}&to={}",
        T0 - 1,
        T0 + 3_600_000_000_000
    );
    let get = |token: &'static str| {
        let req = app
            .client
            .get(format!("{}{q}", app.http))
            .bearer_auth(token);
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        }
    };
    let all = get(SRE).await;
    assert!(
        truth.storm.iter().any(|id| mentions(&all, id)),
        "the unscoped reader sees who evicted the family"
    );
    let mine = get(ACME).await;
    for id in &truth.storm {
        assert!(!mentions(&mine, id), "the acme reader sees globex's {id}");
    }
    assert!(!mine.contains("globex"));
    let fp: serde_json::Value = serde_json::from_str(&mine).unwrap();
    let evicted = fp["families"][0]["misses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["why"]["kind"] == "evicted")
        .unwrap_or_else(|| panic!("{mine}"));
    let top = evicted["why"]["since"]["top"].as_array().unwrap();
    assert!(
        top.iter()
            .all(|t| tokenscope_core::links::is_alias(t[0].as_str().unwrap())),
        "{top:?}"
    );
}
