//! Iteration-time model of an engine step, from the batch it runs, per GPU/model profile.
//!
//! A step reads all weights once (memory-bound floor), computes 2·params FLOPs per new token
//! (prefill and decode alike), attends over the context (prefill: quadratic in the prompt; decode:
//! reading each sequence's KV cache), and pays a fixed scheduling/sampling overhead.
//!
//! Sources for the profile numbers: NVIDIA H100 SXM datasheet (3.35 TB/s HBM3, 989 TFLOPS dense
//! BF16); Llama-3.1-8B (8.03 B params, 32 layers, 4096 hidden, 8 KV heads × 128 dims: 128 KiB of
//! KV cache per token in BF16) and Llama-3.1-70B (80 layers, 8192 hidden, 8 KV heads: 320 KiB);
//! the MFU and overheads are chosen so that an 8B model on one H100 decodes a small batch in about
//! 7–8 ms per step and prefills about 25–30k tokens/s, in line with published vLLM and SGLang
//! benchmarks of that setup.

use tokenscope_core::model::Nanos;

#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    /// The model's name as the simulated engine reports it: the diagnosis knows its shape by
    /// that name (family and size), and the vocabulary is stored under it.
    pub model: &'static str,
    /// Model parameters (for 2·params FLOPs per token) and bytes read per step.
    pub params: f64,
    pub weight_bytes: f64,
    pub layers: f64,
    pub hidden: f64,
    /// KV-cache bytes per token of context.
    pub kv_bytes_per_token: f64,
    /// Aggregate GPU figures (all GPUs of the instance).
    pub hbm_bytes_per_s: f64,
    pub flops: f64,
    /// Model FLOPs utilisation reached by real kernels.
    pub mfu: f64,
    /// Scheduling, sampling and launch overhead per step.
    pub overhead_ns: f64,
    /// Relative standard deviation of step times.
    pub jitter: f64,
}

pub const PROFILES: [Profile; 2] = [
    Profile {
        name: "llama-8b-h100",
        model: "sim/llama-8b (cl100k vocabulary)",
        params: 8.03e9,
        weight_bytes: 16.1e9,
        layers: 32.0,
        hidden: 4096.0,
        kv_bytes_per_token: 131_072.0,
        hbm_bytes_per_s: 3.35e12,
        flops: 989e12,
        mfu: 0.5,
        overhead_ns: 2.5e6,
        jitter: 0.03,
    },
    Profile {
        name: "llama-70b-4xh100",
        model: "sim/llama-70b (cl100k vocabulary)",
        params: 70.6e9,
        weight_bytes: 141.2e9,
        layers: 80.0,
        hidden: 8192.0,
        kv_bytes_per_token: 327_680.0,
        hbm_bytes_per_s: 4.0 * 3.35e12,
        flops: 4.0 * 989e12,
        // Tensor-parallel communication lowers the useful fraction.
        mfu: 0.4,
        overhead_ns: 4.0e6,
        jitter: 0.03,
    },
];

pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// What a step computes: prefill chunks (tokens and how much context precedes them) and
/// decoding sequences (their context lengths).
#[derive(Default, Debug)]
pub struct StepLoad {
    pub prefill: Vec<(u32, u32)>,
    pub decode_contexts: Vec<u32>,
    /// Draft tokens verified beside the decodes (speculative decoding): computed like new
    /// tokens, read no more KV cache.
    pub draft_tokens: u32,
}

impl Profile {
    /// The FLOPs of one prefill chunk: `n` new tokens after `offset` already computed (linear
    /// layers, and causal attention: each new token attends to everything before it).
    pub fn prefill_flops(&self, n: u32, offset: u32) -> f64 {
        let (n, o) = (f64::from(n), f64::from(offset));
        2.0 * self.params * n + 4.0 * self.layers * self.hidden * (n * o + n * n / 2.0)
    }

    /// Step time in nanoseconds, before jitter.
    pub fn step_ns(&self, load: &StepLoad) -> Nanos {
        let new_tokens: f64 = load.prefill.iter().map(|&(n, _)| f64::from(n)).sum::<f64>()
            + load.decode_contexts.len() as f64
            + f64::from(load.draft_tokens);
        let linear = 2.0 * self.params * new_tokens;
        // Causal attention: each new token attends to everything before it (QKᵀ and AV).
        let attention: f64 = load
            .prefill
            .iter()
            .map(|&(n, offset)| {
                let (n, o) = (f64::from(n), f64::from(offset));
                4.0 * self.layers * self.hidden * (n * o + n * n / 2.0)
            })
            .sum();
        let compute_s = (linear + attention) / (self.flops * self.mfu);
        let kv_read: f64 = load
            .decode_contexts
            .iter()
            .map(|&c| f64::from(c) * self.kv_bytes_per_token)
            .sum();
        let memory_s = (self.weight_bytes + kv_read) / self.hbm_bytes_per_s;
        // Compute and memory traffic overlap; the slower one bounds the step.
        (compute_s.max(memory_s) * 1e9 + self.overhead_ns) as Nanos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The diagnosis costs a prompt by the shape it knows the model's name by; the simulated
    /// engine computes with the profile's own figures. They are the same model.
    #[test]
    fn each_profile_is_the_model_the_diagnosis_knows_by_its_name() {
        use tokenscope_core::model::Architecture;
        for p in &PROFILES {
            let a = Architecture::known(p.model).expect("a listed model");
            assert_eq!(
                (a.params, f64::from(a.layers), f64::from(a.attention_width)),
                (p.params, p.layers, p.hidden),
                "{}",
                p.name
            );
        }
    }

    #[test]
    fn an_8b_model_on_an_h100_has_plausible_step_times() {
        let p = profile("llama-8b-h100").unwrap();
        let decode = p.step_ns(&StepLoad {
            prefill: vec![],
            decode_contexts: vec![1000; 16],
            ..StepLoad::default()
        });
        assert!(
            (6_000_000..10_000_000).contains(&decode),
            "decode step {decode} ns"
        );
        let prefill = p.step_ns(&StepLoad {
            prefill: vec![(8192, 0)],
            decode_contexts: vec![],
            ..StepLoad::default()
        });
        let tokens_per_s = 8192.0 / (prefill as f64 / 1e9);
        assert!(
            (20_000.0..35_000.0).contains(&tokens_per_s),
            "prefill {tokens_per_s} tokens/s"
        );
    }
}
