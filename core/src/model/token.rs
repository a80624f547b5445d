//! One output token: what was chosen, when, and what else was likely.

use serde::{Deserialize, Serialize};

use super::Nanos;

/// Control tokens are flagged so the UI never renders them as nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecialToken {
    #[default]
    None,
    Eos,
    Bos,
    Pad,
    Other,
}

impl SpecialToken {
    pub fn is_special(self) -> bool {
        self != SpecialToken::None
    }

    /// The name the API uses (`none`, `eos`, `bos`, `pad`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            SpecialToken::None => "none",
            SpecialToken::Eos => "eos",
            SpecialToken::Bos => "bos",
            SpecialToken::Pad => "pad",
            SpecialToken::Other => "other",
        }
    }

    /// Stable small code used by the storage encoding; see [`SpecialToken::from_code`].
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Recognises the control-token spellings of common tokenizers.
    pub fn from_text(text: &str) -> SpecialToken {
        let marked = (text.starts_with("<|") && text.ends_with("|>"))
            || (text.starts_with('<')
                && text.ends_with('>')
                && !text.contains(' ')
                && text.len() <= 24)
            || (text.starts_with('[')
                && text.ends_with(']')
                && text.len() <= 12
                && text[1..].chars().next().is_some_and(char::is_uppercase));
        if !marked {
            return SpecialToken::None;
        }
        let t = text.to_ascii_lowercase();
        // Precise spellings only: `<|end_header_id|>` is a control token but not the end of output.
        if [
            "eos",
            "eot",
            "</s>",
            "im_end",
            "endoftext",
            "end_of_text",
            "|end|",
        ]
        .iter()
        .any(|k| t.contains(k))
        {
            SpecialToken::Eos
        } else if ["bos", "begin_of_text", "<s>"]
            .iter()
            .any(|k| t.contains(k))
        {
            SpecialToken::Bos
        } else if t.contains("pad") {
            SpecialToken::Pad
        } else {
            SpecialToken::Other
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        [Self::None, Self::Eos, Self::Bos, Self::Pad, Self::Other]
            .get(usize::from(code))
            .copied()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// `None` when the source reports only the text (OpenAI-style logprobs).
    pub token_id: Option<u32>,
    pub text: Option<String>,
    pub logprob: f32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Token {
    /// Vocabulary id; `None` for timing-only or text-only sources (TensorRT-LLM step metrics,
    /// OpenAI-style responses), which still give times, texts and probabilities.
    pub token_id: Option<u32>,
    /// When the engine emitted the token (end of the iteration that produced it).
    pub emitted_ns: Option<Nanos>,
    /// When the iteration that produced it was scheduled (start of compute).
    pub scheduled_ns: Option<Nanos>,
    /// Engine iteration that produced it.
    pub iteration: Option<u64>,
    pub logprob: Option<f32>,
    /// 1-based rank among the whole vocabulary (1 = most likely).
    pub rank: Option<u32>,
    pub text: Option<String>,
    pub special: SpecialToken,
    /// Top-k alternatives in rank order, most likely first.
    pub candidates: Vec<Candidate>,
    /// Batch size and queue length at this token's step, when the engine reports them per token
    /// rather than as iteration records.
    pub batch_size: Option<u32>,
    pub waiting: Option<u32>,
}

impl Token {
    /// The chosen token's probability, the entropy of the returned candidates (nats), and the
    /// chosen token's probability minus the best other candidate's.
    pub fn word_choice(&self) -> (Option<f32>, Option<f32>, Option<f32>) {
        let p = self.logprob.map(f32::exp);
        let entropy = (!self.candidates.is_empty()).then(|| {
            self.candidates
                .iter()
                .map(|c| c.logprob.exp())
                .filter(|&q| q > 0.0)
                .map(|q| -q * q.ln())
                .sum()
        });
        let is_chosen = |c: &&Candidate| match (c.token_id, self.token_id) {
            (Some(a), Some(b)) => a == b,
            _ => c.text.is_some() && c.text == self.text,
        };
        let best_other = self
            .candidates
            .iter()
            .filter(|c| !is_chosen(c))
            .map(|c| c.logprob.exp())
            .fold(None, |m: Option<f32>, q| Some(m.map_or(q, |m| m.max(q))));
        let margin = p.zip(best_other).map(|(p, o)| p - o);
        (p, entropy, margin)
    }

    /// The chosen token's rank as implied by the candidates, when it is among them: matched by
    /// id, or by text where ids are unknown.
    pub fn rank_from_candidates(&self) -> Option<u32> {
        self.candidates
            .iter()
            .position(|c| match (c.token_id, self.token_id) {
                (Some(a), Some(b)) => a == b,
                (None, None) => c.text.is_some() && c.text == self.text,
                _ => false,
            })
            .map(|i| i as u32 + 1)
    }

    /// The chosen token's rank: as reported, else its place among the candidates, else — when
    /// the candidates can be compared with it and it is not among them — beyond them (`> k`).
    pub fn rank_known(&self) -> Option<Rank> {
        if let Some(r) = self.rank.or_else(|| self.rank_from_candidates()) {
            return Some(Rank::At(r));
        }
        // Ids against ids, or texts against texts where ids are unknown; a mix proves nothing.
        let comparable = |c: &Candidate| match (c.token_id, self.token_id) {
            (Some(_), Some(_)) => true,
            (None, None) => c.text.is_some() && self.text.is_some(),
            _ => false,
        };
        (!self.candidates.is_empty() && self.candidates.iter().all(comparable))
            .then_some(Rank::Beyond(self.candidates.len() as u32))
    }
}

/// Where a sampled token ranked among the model's candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// 1-based (1 = the most likely).
    At(u32),
    /// Not among the `k` candidates returned with it: rank greater than `k`.
    Beyond(u32),
}

impl Rank {
    /// Not the most likely token.
    pub fn below_top(self) -> bool {
        !matches!(self, Rank::At(1))
    }
}

impl std::fmt::Display for Rank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rank::At(k) => write!(f, "{k}"),
            Rank::Beyond(k) => write!(f, "> {k}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_tokens_are_recognised() {
        for (text, kind) in [
            ("<|eot_id|>", SpecialToken::Eos),
            ("</s>", SpecialToken::Eos),
            ("<|im_end|>", SpecialToken::Eos),
            ("<|endoftext|>", SpecialToken::Eos),
            ("<|begin_of_text|>", SpecialToken::Bos),
            ("<s>", SpecialToken::Bos),
            ("<pad>", SpecialToken::Pad),
            ("[PAD]", SpecialToken::Pad),
            ("<|start_header_id|>", SpecialToken::Other),
            ("<|end_header_id|>", SpecialToken::Other),
            ("<|tool_call|>", SpecialToken::Other),
            (" <b>", SpecialToken::None),
            ("hello", SpecialToken::None),
            ("[1]", SpecialToken::None),
        ] {
            assert_eq!(SpecialToken::from_text(text), kind, "{text}");
        }
    }
}
