//! What the model said: an answer ended by an unlikely stop token, tokens sampled far from the top.

use super::{Cause, Finding, Severity, Thresholds};
use crate::model::{Rank, RequestTrace, SpecialToken};

pub(super) fn word_choice(r: &RequestTrace, th: &Thresholds) -> Vec<Finding> {
    let mut out = Vec::new();
    let n = r.tokens.len();
    let prob = |lp: Option<f32>| lp.map(|l| l.exp());
    let eos = r.tokens.last().filter(|t| t.special == SpecialToken::Eos);
    if let Some((last, p)) = eos.and_then(|t| {
        prob(t.logprob)
            .filter(|&p| p < th.eos_probability)
            .map(|p| (t, p))
    }) {
        let top = last
            .candidates
            .first()
            .filter(|c| c.token_id != last.token_id || c.text != last.text);
        out.push(Finding {
                cause: Cause::LowProbabilityEos,
                severity: Severity::Warning,
                summary: format!(
                    "The answer ended after {n} tokens on an end-of-sequence token sampled at p = {p:.3}{}{}.",
                    last.rank_known().map(|k| format!(" (rank {k})")).unwrap_or_default(),
                    top.map(|c| format!("; the likeliest token was {} (p = {:.3})", named(c.text.as_deref(), c.token_id), c.logprob.exp()))
                        .unwrap_or_default()
                ),
                culprits: Vec::new(),
                evidence: match last.rank_known() {
                    Some(Rank::Beyond(k)) => serde_json::json!({ "index": n - 1, "probability": p, "rank": null, "rank_beyond": k }),
                    _ => serde_json::json!({ "index": n - 1, "probability": p, "rank": last.rank }),
                },
                inferred: false,
            });
    }
    let unlikely: Vec<(usize, f32)> = r
        .tokens
        .iter()
        .enumerate()
        // A token outside the returned top-k (rank "> k") is judged by its probability too.
        .filter(|(_, t)| {
            t.special == SpecialToken::None && t.rank_known().is_some_and(Rank::below_top)
        })
        .filter_map(|(i, t)| {
            prob(t.logprob)
                .filter(|&p| p < th.token_probability)
                .map(|p| (i, p))
        })
        .collect();
    if let Some(&(worst, p)) = unlikely.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        out.push(Finding {
            cause: Cause::LowProbabilityToken,
            severity: Severity::Info,
            summary: format!(
                "{} token{} sampled far from the top (p < {}); the least likely, {} at position {worst}, had p = {p:.4}.",
                unlikely.len(),
                if unlikely.len() == 1 { " was" } else { "s were" },
                th.token_probability,
                named(r.tokens[worst].text.as_deref(), r.tokens[worst].token_id)
            ),
            culprits: Vec::new(),
            evidence: serde_json::json!({ "positions": unlikely.iter().map(|(i, _)| i).collect::<Vec<_>>() }),
            inferred: false,
        });
    }
    out
}

/// A token as a sentence names it: its text quoted, else its id (texts redacted at ingest, or
/// never reported), rather than an empty `""`.
fn named(text: Option<&str>, token_id: Option<u32>) -> String {
    match (text, token_id) {
        (Some(t), _) => format!("{t:?}"),
        (None, Some(id)) => format!("token id {id}"),
        (None, None) => "a token without text or id".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::named;

    #[test]
    fn a_token_is_named_by_its_text_else_its_id() {
        assert_eq!(named(Some(" the"), Some(279)), "\" the\"");
        assert_eq!(
            named(Some(""), Some(5)),
            "\"\"",
            "an empty text is still its text"
        );
        assert_eq!(named(None, Some(4817)), "token id 4817");
        assert_eq!(named(None, None), "a token without text or id");
    }
}
