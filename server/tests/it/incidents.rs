//! Incidents over HTTP: an incident frozen from the prefill-interrupts-decode scenario tells the
//! same story after its raw traces are gone; slugs are random; revoked links answer 410; the
//! preview decodes to 1200×630 and its SVG parses; a hostile title stays text everywhere.

use crate::common;

use common::*;
use sqlx::Connection;
use tokenscope_sim as sim;

async fn scenario(app: &TestApp) {
    let s = sim::scenarios::build("prefill-interrupts-decode", T0, 1).unwrap();
    app.send_sim(&s.runs).await;
}

/// Creates an incident from `body`; the reply (`slug`, `path`).
async fn create_from(app: &TestApp, body: serde_json::Value) -> serde_json::Value {
    let resp = app.post_json("/api/v1/incidents", body.to_string()).await;
    assert_eq!(resp.status(), 201, "{body}");
    resp.json().await.unwrap()
}

/// An incident of the prefill-interrupts-decode victim.
async fn create(app: &TestApp, title: &str) -> serde_json::Value {
    create_from(
        app,
        serde_json::json!({
            "title": title, "note": "seen by on-call", "instance": "sim-pid", "requests": ["pid-victim"],
        }),
    )
    .await
}

#[tokio::test]
async fn an_incident_keeps_its_story_after_the_traces_are_gone() {
    let app = spawn_app().await;
    scenario(&app).await;
    let live = app
        .get_json("/api/v1/requests/pid-victim?instance=sim-pid")
        .await;
    let created = create(&app, "Decode stalls on sim-pid").await;
    let slug = created["slug"].as_str().unwrap().to_string();
    assert_eq!(slug.len(), 32);
    assert_eq!(created["path"], format!("/incidents/{slug}"));

    let check = |i: serde_json::Value| {
        assert_eq!(i["title"], "Decode stalls on sim-pid");
        assert!(
            i["headline"]
                .as_str()
                .unwrap()
                .starts_with("TPOT 87.6 ms > 50 ms SLO"),
            "{}",
            i["headline"]
        );
        assert_eq!(i["victims"], serde_json::json!(["pid-victim"]));
        assert_eq!(i["culprits"].as_array().unwrap().len(), 6);
        let req = &i["snapshot"]["requests"][0];
        assert_eq!(req["detail"]["request_id"], "pid-victim");
        assert_eq!(req["detail"]["tokens"].as_array().unwrap().len(), 100);
        assert_eq!(
            req["diagnosis"]["findings"][0]["cause"],
            "prefill_interrupted_decode"
        );
        let w = &i["snapshot"]["waterfall"];
        let focus = w["focus_row"].as_u64().unwrap();
        let below: Vec<&str> = w["tracks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["row"].as_u64().unwrap() == focus + 1)
            .map(|t| t["request_id"].as_str().unwrap())
            .collect();
        assert!(
            below[0].starts_with("pid-prefill-"),
            "culprits pulled next to the victim"
        );
    };
    let frozen = app.get_json(&format!("/api/v1/incidents/{slug}")).await;
    assert_eq!(
        frozen["snapshot"]["requests"][0]["detail"], live,
        "the frozen request page is the live one, token for token"
    );
    check(frozen);

    // Retention drops the raw traces: the incident still tells the story.
    let mut db = sqlx::PgConnection::connect(&app.database_url)
        .await
        .unwrap();
    sqlx::query("TRUNCATE requests, iteration_blocks, iteration_rollups CASCADE")
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(app.get("/api/v1/requests/pid-victim").await.status(), 404);
    check(app.get_json(&format!("/api/v1/incidents/{slug}")).await);

    let md = app
        .get_text(&format!("/api/v1/incidents/{slug}/markdown"))
        .await;
    assert!(md.starts_with("### Decode stalls on sim-pid"), "{md}");
    assert!(
        md.contains("**prefill\\_interrupted\\_decode** `pid-victim`: TPOT 87.6 ms \\> 50 ms SLO"),
        "{md}"
    );
    assert!(md.contains(&format!("/incidents/{slug}>")), "{md}");

    let list = app.get_json("/api/v1/incidents?q=stalls").await;
    assert_eq!(list["incidents"][0]["slug"], slug);
    let none = app.get_json("/api/v1/incidents?q=nothing-like-this").await;
    assert_eq!(none["incidents"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn previews_are_1200_by_630_and_hostile_titles_stay_text() {
    let app = spawn_app().await;
    scenario(&app).await;
    let title = "<script>alert(1)</script> & \u{1b}[31m";
    let slug = create(&app, title).await["slug"]
        .as_str()
        .unwrap()
        .to_string();

    let resp = app.get(&format!("/incidents/{slug}/preview.png")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "image/png");
    let png = resp.bytes().await.unwrap();
    let decoder = png::Decoder::new(std::io::Cursor::new(png.to_vec()));
    let reader = decoder.read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (1200, 630));
    // Rendered once, then served from the database.
    let again = app
        .get(&format!("/incidents/{slug}/preview.png"))
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(again, png);

    let svg = app
        .get_text(&format!("/incidents/{slug}/preview.svg"))
        .await;
    assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
    assert!(
        svg.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp;"),
        "title escaped"
    );
    assert!(!svg.contains("<script"), "no markup from the title");
    assert!(!svg.contains('\u{1b}'), "no control characters in XML");

    let md = app
        .get_text(&format!("/api/v1/incidents/{slug}/markdown"))
        .await;
    assert!(
        md.starts_with("### \\<script\\>alert(1)\\</script\\> \\&"),
        "{md}"
    );
}

/// The head of the incident page: leptos_meta writes the title unescaped, so `app::ui` escapes
/// it once; exactly once, or a leptos_meta that starts escaping would show `&amp;lt;` in the tab.
#[test]
fn a_title_that_closes_its_element_stays_text_in_the_head() {
    on_server_stacks(async {
        let app = spawn_app().await;
        scenario(&app).await;
        let title = "</title><script>alert(1)</script><title>x & \"q\" 'a'";
        let slug = create(&app, title).await["slug"]
            .as_str()
            .unwrap()
            .to_string();
        let resp = app.get(&format!("/incidents/{slug}")).await;
        assert_eq!(resp.status(), 200);
        let policy = resp.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_string();
        let html = resp.text().await.unwrap();
        let (head, body) = html.split_once("</head>").expect("a head");
        let escaped = "&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;title&gt;x &amp; &quot;q&quot; &#39;a&#39;";
        assert!(
            head.contains(&format!("<title>{escaped} · tokenscope incident</title>")),
            "{head}"
        );
        assert_eq!(head.matches("<title>").count(), 1, "{head}");
        assert!(
            !html.contains("<script>alert(1)"),
            "no markup from the title"
        );
        // The Open Graph tags and the heading hold it too, as attribute and text.
        assert!(head.contains("property=\"og:title\""), "{head}");
        assert!(body.contains("data-testid=\"incident-title\""), "{body}");

        // Every script the page carries has this response's nonce, and the policy names it.
        let nonce = policy
            .split(['\'', ' '])
            .find_map(|w| w.strip_prefix("nonce-"))
            .expect("a nonce in the policy")
            .to_string();
        let scripts = html.matches("<script").count();
        assert!(scripts >= 2, "hydration and resources: {html}");
        assert_eq!(
            html.matches(&format!("<script nonce=\"{nonce}\"")).count()
                + html
                    .matches(&format!("<script type=\"module\" nonce=\"{nonce}\""))
                    .count(),
            scripts,
            "{html}"
        );
        let again = app.get(&format!("/incidents/{slug}")).await;
        let other = again.headers()["content-security-policy"].to_str().unwrap();
        assert!(!other.contains(&nonce), "a fresh nonce per response");
    })
}

#[tokio::test]
async fn revoked_links_answer_410_and_slugs_are_not_sequential() {
    let app = spawn_app().await;
    scenario(&app).await;
    let a = create(&app, "first").await["slug"]
        .as_str()
        .unwrap()
        .to_string();
    let b = create(&app, "second").await["slug"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(a, b);
    let shared_prefix = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    assert!(shared_prefix < 8, "{a} {b}");

    let resp = app
        .client
        .delete(format!("{}/api/v1/incidents/{a}", app.http))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let gone = app.get(&format!("/api/v1/incidents/{a}")).await;
    assert_eq!(gone.status(), 410);
    let body: serde_json::Value = gone.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("revoked"));
    assert_eq!(
        app.get(&format!("/incidents/{a}/preview.png"))
            .await
            .status(),
        410
    );
    assert_eq!(
        app.get(&format!("/api/v1/incidents/{b}")).await.status(),
        200
    );
    assert_eq!(app.get("/api/v1/incidents/0123").await.status(), 404);

    // Bad bodies say what is wrong.
    for (body, needle) in [
        (
            r#"{"title": "", "instance": "sim-pid", "requests": ["pid-victim"]}"#,
            "title is empty",
        ),
        (
            r#"{"title": "x", "instance": "sim-pid", "requests": []}"#,
            "requests must name",
        ),
        (
            r#"{"title": "x", "instance": "sim-pid", "requests": ["nope"]}"#,
            "nope",
        ),
        ("not json", "not a new incident"),
    ] {
        let resp = app.post_json("/api/v1/incidents", body).await;
        assert!(resp.status().is_client_error(), "{body}");
        let e: serde_json::Value = resp.json().await.unwrap();
        assert!(e["error"].as_str().unwrap().contains(needle), "{body}: {e}");
    }
}

#[tokio::test]
async fn each_seed_case_freezes_into_an_incident_that_names_its_cause() {
    let app = spawn_app().await;
    for name in ["long-prompt-monopolizes", "low-probability-eos"] {
        let s = sim::scenarios::build(name, T0, 1).unwrap();
        app.send_sim(&s.runs).await;
    }
    for (instance, victim, needle, culprit) in [
        (
            "sim-lpm",
            "lpm-short",
            "lpm-long's 96,000-token prefill",
            Some("lpm-long"),
        ),
        (
            "sim-eos",
            "eos-victim",
            "end-of-sequence token sampled at p = 0.100",
            None,
        ),
    ] {
        let body =
            serde_json::json!({ "title": victim, "instance": instance, "requests": [victim] });
        let slug = create_from(&app, body).await["slug"]
            .as_str()
            .unwrap()
            .to_string();
        let i = app.get_json(&format!("/api/v1/incidents/{slug}")).await;
        assert!(
            i["headline"].as_str().unwrap().contains(needle),
            "{}",
            i["headline"]
        );
        let culprits: Vec<&str> = i["culprits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(
            culprits,
            culprit.into_iter().collect::<Vec<_>>(),
            "{victim}"
        );
        let png = app.get(&format!("/incidents/{slug}/preview.png")).await;
        assert_eq!(png.status(), 200, "{victim}");
    }
}
