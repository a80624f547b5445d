//! A served model's shape as far as a prefill's cost depends on it, known by the model's name.
//!
//! A prompt token costs its pass through the linear layers (2 · parameters FLOPs) plus causal
//! attention over everything before it (4 · layers · query width FLOPs per earlier token), so a
//! chunk late in a long prompt costs more per token than a short prompt does, and by how much
//! depends on the model: attention catches up with the linear layers at 19k tokens of context
//! on Llama-3.2-1B, 31k on Llama-3.1-8B, 54k on 70B. The diagnosis shares a step (or, with spans
//! only, an interval) among prompts by that cost; a constant between 8B's and 70B's is a few
//! percent off for either, which is a culprit at 10 % of the lost time named or not.
//!
//! The engines' traces name the model (vLLM's `gen_ai.response.model`, the plugins' resource)
//! but not its shape, so the shapes of common open models are listed here, from their published
//! `config.json` (`num_hidden_layers`, `num_attention_heads × head_dim`) and parameter counts.
//! A model not listed is costed with [`DEFAULT_ATTENTION_EVEN_TOKENS`].

/// The shape of a dense transformer that sets what a prefill chunk computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Architecture {
    /// Parameters, embeddings included (2 FLOPs each per token).
    pub params: f64,
    pub layers: u32,
    /// Query heads × head dimension: the width of each attention product.
    pub attention_width: u32,
}

/// The context length at which attention costs as much as the linear layers, for a model whose
/// shape is not known: between 8B's 31k and 70B's 54k.
pub const DEFAULT_ATTENTION_EVEN_TOKENS: f64 = 40_000.0;

/// `(family, size, shape)`: a name matches when it contains the family and the size as a word
/// (`8b` in `Llama-3.1-8B-Instruct`). Families are tried in order, the more specific first.
const KNOWN: &[(&str, &str, Architecture)] = &[
    ("llama", "1b", arch(1.24e9, 16, 2048)),
    ("llama", "3b", arch(3.21e9, 28, 3072)),
    ("llama", "7b", arch(6.74e9, 32, 4096)),
    ("llama", "8b", arch(8.03e9, 32, 4096)),
    ("llama", "13b", arch(13.0e9, 40, 5120)),
    ("llama", "70b", arch(70.6e9, 80, 8192)),
    ("llama", "405b", arch(405.9e9, 126, 16384)),
    ("qwen2", "0.5b", arch(0.49e9, 24, 896)),
    ("qwen2", "1.5b", arch(1.54e9, 28, 1536)),
    ("qwen2", "3b", arch(3.09e9, 36, 2048)),
    ("qwen2", "7b", arch(7.62e9, 28, 3584)),
    ("qwen2", "14b", arch(14.7e9, 48, 5120)),
    ("qwen2", "32b", arch(32.8e9, 64, 5120)),
    ("qwen2", "72b", arch(72.7e9, 80, 8192)),
    ("mistral", "7b", arch(7.24e9, 32, 4096)),
];

const fn arch(params: f64, layers: u32, attention_width: u32) -> Architecture {
    Architecture {
        params,
        layers,
        attention_width,
    }
}

impl Architecture {
    /// The shape of the model `name` (a Hugging Face id such as `meta-llama/Llama-3.1-8B-Instruct`,
    /// any case), if it is one of the listed families and sizes.
    pub fn known(name: &str) -> Option<Self> {
        let name = name.to_ascii_lowercase();
        let words: Vec<&str> = name
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
            .collect();
        KNOWN
            .iter()
            .find(|(family, size, _)| name.contains(family) && words.contains(size))
            .map(|&(.., a)| a)
    }

    /// The context length at which a token's attention costs as much as its linear layers:
    /// 2 · params = 4 · layers · width · context.
    pub fn attention_even_tokens(&self) -> f64 {
        self.params / (2.0 * f64::from(self.layers) * f64::from(self.attention_width))
    }
}

/// [`Architecture::attention_even_tokens`] of `model`, or the default when its shape is unknown.
pub fn attention_even_tokens(model: Option<&Architecture>) -> f64 {
    model.map_or(
        DEFAULT_ATTENTION_EVEN_TOKENS,
        Architecture::attention_even_tokens,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn even(name: &str) -> Option<f64> {
        Architecture::known(name).map(|a| (a.attention_even_tokens() / 100.0).round() * 100.0)
    }

    #[test]
    fn common_model_ids_are_known_by_family_and_size() {
        assert_eq!(even("meta-llama/Llama-3.1-8B-Instruct"), Some(30_600.0));
        assert_eq!(
            even("meta-llama/Meta-Llama-3.1-70B-Instruct"),
            Some(53_900.0)
        );
        assert_eq!(even("meta-llama/Llama-3.2-1B"), Some(18_900.0));
        assert_eq!(even("Qwen/Qwen2.5-7B-Instruct"), Some(38_000.0));
        assert_eq!(even("Qwen/Qwen2.5-0.5B-Instruct"), Some(11_400.0));
        assert_eq!(even("mistralai/Mistral-7B-Instruct-v0.3"), Some(27_600.0));
        // The simulator's model is Llama-3.1-8B's shape.
        assert_eq!(even("sim/llama-8b (cl100k vocabulary)"), Some(30_600.0));
    }

    #[test]
    fn a_size_is_a_whole_word_and_unknown_models_have_no_shape() {
        // `18b` is not `8b`; `1.5b` is not `5b`.
        assert_eq!(even("llama-18b"), None);
        assert_eq!(even("Qwen/Qwen2.5-1.5B"), Some(17_900.0));
        assert_eq!(even("Qwen/Qwen3-8B"), None);
        assert_eq!(even("facebook/opt-125m"), None);
        assert_eq!(even(""), None);
        assert_eq!(
            attention_even_tokens(None),
            DEFAULT_ATTENTION_EVEN_TOKENS,
            "unknown models are costed with the default"
        );
    }
}
