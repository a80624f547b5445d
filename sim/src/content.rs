//! Token content for simulated requests: ids and texts from a real tokenizer vocabulary
//! (cl100k_base, bundled in the tiktoken-rs crate), and logprobs with a realistic shape — mostly
//! confident, with occasional high-entropy positions — plus top-k candidates in rank order.

use std::sync::OnceLock;

use tokenscope_core::model::{Candidate, SpecialToken, Token};

use crate::Rng;

/// `<|endoftext|>` in cl100k_base.
pub const EOS_ID: u32 = 100_257;
pub const EOS_TEXT: &str = "<|endoftext|>";
pub const TOP_K: usize = 5;

/// Text the simulated model "writes": its tokens are walked in order, so outputs read naturally.
const CORPUS: &str = "The request spent most of its time waiting in the queue while a long prompt was \
prefilled. Continuous batching lets the engine add new requests at every step, but a large prefill \
can still pause the decoding of everyone else. Chunked prefill bounds the work of each step, so the \
time between two tokens stays close to the decode step time. When the key-value cache is full, the \
scheduler evicts a running request and recomputes it later, which shows up as a gap in its tokens. \
In disaggregated serving the prompt is processed on one instance and the cache is transferred to \
another, so a slow transfer delays the first token. Sampling picks each token from the model's \
distribution; most positions are confident, a few are not, and sometimes an unlikely token is chosen.";

struct Vocab {
    corpus: Vec<u32>,
    texts: std::collections::HashMap<u32, String>,
}

fn vocab() -> &'static Vocab {
    static VOCAB: OnceLock<Vocab> = OnceLock::new();
    VOCAB.get_or_init(|| {
        let bpe = tiktoken_rs::cl100k_base_singleton();
        let corpus: Vec<u32> = bpe.encode_ordinary(CORPUS);
        let texts = corpus
            .iter()
            .map(|&id| (id, bpe.decode(&[id]).unwrap_or_default()))
            .collect();
        Vocab { corpus, texts }
    })
}

pub fn text_of(id: u32) -> String {
    if id == EOS_ID {
        return EOS_TEXT.into();
    }
    vocab().texts.get(&id).cloned().unwrap_or_default()
}

/// How the answer ends.
#[derive(Clone, Copy, Debug)]
pub enum Ending {
    /// The model was done: EOS is the likely choice.
    ConfidentEos,
    /// EOS sampled although another token was far likelier (rank 2, probability `p`).
    UnlikelyEos { p: f32 },
    /// Cut by max_tokens: no EOS.
    Length,
}

/// Fills ids, texts, logprobs and candidates into `tokens` (which carry only times).
pub fn fill(tokens: &mut [Token], ending: Ending, rng: &mut Rng) {
    let v = vocab();
    let n = tokens.len();
    let start = rng.below(v.corpus.len() as u64) as usize;
    for (i, t) in tokens.iter_mut().enumerate() {
        let last = i + 1 == n;
        let chosen = v.corpus[(start + i) % v.corpus.len()];
        // Confidence: usually high; one position in ten is uncertain.
        let top_p: f32 = if rng.below(10) == 0 {
            0.3 + rng.below(40) as f32 / 100.0
        } else {
            0.85 + rng.below(14) as f32 / 100.0
        };
        let mut alternatives: Vec<u32> = Vec::with_capacity(TOP_K);
        while alternatives.len() < TOP_K - 1 {
            let id = v.corpus[rng.below(v.corpus.len() as u64) as usize];
            if id != chosen && !alternatives.contains(&id) {
                alternatives.push(id);
            }
        }
        let mut rest = 1.0 - top_p;
        let mut probs = Vec::with_capacity(TOP_K);
        probs.push(top_p);
        for _ in 0..TOP_K - 1 {
            let p = rest * (0.3 + rng.below(40) as f32 / 100.0);
            probs.push(p.min(*probs.last().unwrap_or(&1.0)));
            rest -= p;
        }
        let (chosen, ids, probs, special) = match (last, ending) {
            (true, Ending::ConfidentEos) => (
                EOS_ID,
                once(EOS_ID, &alternatives),
                probs,
                SpecialToken::Eos,
            ),
            (true, Ending::UnlikelyEos { p }) => {
                // The likely token first, EOS second at probability p.
                let mut ids = vec![chosen, EOS_ID];
                ids.extend(alternatives.iter().take(TOP_K - 2));
                let mut probs = vec![(1.0 - p) * 0.9, p];
                probs.extend([p * 0.5, p * 0.3, p * 0.1]);
                (EOS_ID, ids, probs, SpecialToken::Eos)
            }
            _ => (
                chosen,
                once(chosen, &alternatives),
                probs,
                SpecialToken::None,
            ),
        };
        t.candidates = ids
            .iter()
            .zip(&probs)
            .map(|(&id, &p)| Candidate {
                token_id: Some(id),
                text: Some(text_of(id)),
                logprob: p.max(1e-9).ln(),
            })
            .collect();
        t.token_id = Some(chosen);
        t.text = Some(text_of(chosen));
        t.special = special;
        t.rank = t.rank_from_candidates();
        t.logprob = t
            .candidates
            .iter()
            .find(|c| c.token_id == Some(chosen))
            .map(|c| c.logprob);
    }
}

fn once(first: u32, rest: &[u32]) -> Vec<u32> {
    std::iter::once(first)
        .chain(rest.iter().copied())
        .take(TOP_K)
        .collect()
}
