//! The data-plane A/B: two instances serve the same kind of traffic, but B runs a build whose
//! answers reach their end-of-sequence token sooner (40 % fewer tokens). Compare's word choice
//! per side must show what the simulated engines' answers did (their lengths, how they ended,
//! their tokens' probabilities, read from the simulator's output), and its headline must say it.

use crate::common;

use common::*;
use tokenscope_core::model::{RequestTrace, SpecialToken};
use tokenscope_sim as sim;

/// What a side's answers were, from the engine's output itself.
fn truth(requests: &[RequestTrace]) -> (f64, f64, f64) {
    let with_words: Vec<&RequestTrace> = requests
        .iter()
        .filter(|r| r.tokens.iter().any(|t| t.logprob.is_some()))
        .collect();
    let n = with_words.len() as f64;
    let eos = with_words
        .iter()
        .filter(|r| {
            r.tokens
                .last()
                .is_some_and(|t| t.special == SpecialToken::Eos)
        })
        .count() as f64;
    let length = with_words
        .iter()
        .map(|r| f64::from(r.output_tokens))
        .sum::<f64>();
    let (mut p, mut tokens) = (0.0, 0.0);
    for t in with_words.iter().flat_map(|r| &r.tokens) {
        if let Some(lp) = t.logprob {
            p += f64::from(lp).exp();
            tokens += 1.0;
        }
    }
    (eos / n, length / n, p / tokens)
}

#[tokio::test]
async fn compare_shows_the_build_whose_answers_end_sooner() {
    let app = spawn_app().await;
    let profile = sim::cost::profile("llama-8b-h100").unwrap();
    let mut rng = sim::Rng::new(8);
    let a_reqs = sim::load::poisson("words-a-req", T0, 3.0, 60.0, false, &mut rng);
    let mut b_reqs = sim::load::poisson("words-b-req", T0, 3.0, 60.0, false, &mut rng);
    for r in &mut b_reqs {
        r.output_tokens = (r.output_tokens * 3 / 5).max(2);
    }
    let runs = vec![
        sim::traffic("words-a", profile, a_reqs, 3),
        sim::traffic("words-b", profile, b_reqs, 4),
    ];
    app.send_sim(&runs).await;
    let (eos_a, len_a, p_a) = truth(&runs[0].output.requests);
    let (eos_b, len_b, p_b) = truth(&runs[1].output.requests);
    assert!(
        len_b < 0.7 * len_a,
        "the scenario plants shorter answers: {len_a} {len_b}"
    );

    let (from, to) = (T0 - 1, T0 + 3_600_000_000_000);
    let window = |side: &str| format!("{side}_from={from}&{side}_to={to}");
    let c = app
        .get_json(&format!(
            "/api/v1/compare?a_instance=words-a&b_instance=words-b&{}&{}",
            window("a"),
            window("b")
        ))
        .await;
    let close = |got: &serde_json::Value, want: f64| {
        let got = got.as_f64().unwrap();
        assert!(
            (got - want).abs() < 1e-6 * want.max(1.0),
            "{got} against {want}"
        );
    };
    for (side, (eos, len, p), reqs) in [
        ("a", (eos_a, len_a, p_a), &runs[0].output.requests),
        ("b", (eos_b, len_b, p_b), &runs[1].output.requests),
    ] {
        let w = &c[side]["words"];
        assert_eq!(w["answers"], reqs.len(), "{side}: {w}");
        close(&w["eos_rate"], eos);
        close(&w["mean_answer_tokens"], len);
        // Probabilities are stored to 1/2048 nat (the token block), so to a few parts in 10^4.
        let got = w["mean_probability"].as_f64().unwrap();
        assert!((got - p).abs() < 1e-3, "{side}: {got} against {p}");
        assert!(w["mean_entropy"].as_f64().unwrap() > 0.0, "{w}");
    }
    let headline = c["headline"].as_str().unwrap();
    assert!(
        headline.contains(&format!("answers {len_a:.0} → {len_b:.0} tokens")),
        "{headline}"
    );

    // A side whose engine reported no probabilities has no word choice, and says so.
    let mut timing_only = sim::traffic(
        "words-c",
        profile,
        sim::load::poisson("words-c-req", T0, 1.0, 20.0, false, &mut rng),
        5,
    );
    for r in &mut timing_only.output.requests {
        for t in &mut r.tokens {
            t.logprob = None;
            t.candidates.clear();
            t.rank = None;
        }
    }
    app.send_sim(&[timing_only]).await;
    let c = app
        .get_json(&format!(
            "/api/v1/compare?a_instance=words-a&b_instance=words-c&{}&{}",
            window("a"),
            window("b")
        ))
        .await;
    assert!(c["b"].get("words").is_none(), "{}", c["b"]);
    assert!(c["a"]["words"]["answers"].as_u64().unwrap() > 0);
}
