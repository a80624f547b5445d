//! Named scenarios that reproduce known incidents, each with a healthy control, and the ground
//! truth of who suffered and who caused it.

use serde::Serialize;

use tokenscope_core::model::{
    EngineKind, FinishReason, KvTransfer, Nanos, RequestTrace, Resource, Role,
};

use crate::Rng;
use crate::content::{self, Ending};
use crate::cost::{PROFILES, profile};
use crate::engine::{self, EngineConfig, Output, SimRequest};

const MS: Nanos = 1_000_000;

pub const NAMES: [&str; 8] = [
    "prefill-interrupts-decode",
    "prefill-freezes-decode",
    "long-prompt-monopolizes",
    "low-probability-eos",
    "kv-preemption",
    "pd-kv-transfer-stall",
    "speculation-collapses",
    "repetition-loop",
];

/// Scenarios that are not incidents, built by name only (not part of `all` or the demo):
/// `long-answer` is an 8,000-token answer among chat traffic, for the request page's benchmark.
pub const EXTRA: [&str; 1] = ["long-answer"];

/// What the simulator knows happened: printed with `--truth FILE`, checked by the diagnosis tests.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Truth {
    pub scenario: String,
    /// The diagnosis cause this scenario produces (see the diagnosis API).
    pub cause: String,
    pub instance: String,
    pub victims: Vec<String>,
    pub culprits: Vec<String>,
    /// Culprits of one victim where they are its own (the requests the engine preempted it to
    /// make room for), as the engine's step-level records tell them; others have `culprits`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub culprits_of: std::collections::BTreeMap<String, Vec<String>>,
    /// Requests of the healthy control: same shape, no incident.
    pub controls: Vec<String>,
    pub control_instance: String,
}

/// One instance's simulated traffic.
#[derive(Clone)]
pub struct InstanceRun {
    pub resource: Resource,
    pub output: Output,
}

pub struct Scenario {
    pub runs: Vec<InstanceRun>,
    pub truth: Truth,
}

/// A simulated instance of the 8B model (the first profile), which every scenario runs.
pub fn resource(instance: &str, role: Role) -> Resource {
    Resource {
        engine: EngineKind::Other,
        engine_version: "tokenscope-sim".into(),
        model: PROFILES[0].model.into(),
        instance_id: instance.into(),
        role,
        host: "sim".into(),
    }
}

/// Runs an engine and gives every request its token content.
fn simulate(
    instance: &str,
    role: Role,
    cfg: &EngineConfig,
    reqs: Vec<SimRequest>,
    rng: &mut Rng,
    endings: &dyn Fn(&str) -> Ending,
) -> InstanceRun {
    let first_iteration = 1 + rng.below(1000) * 1000;
    let mut output = engine::run(cfg, reqs, rng, first_iteration);
    for r in &mut output.requests {
        give_words(r, endings(&r.request_id), rng);
    }
    InstanceRun {
        resource: resource(instance, role),
        output,
    }
}

/// Fills a finished request's tokens with words and sets how it ended (aborted ones have none).
pub fn give_words(r: &mut RequestTrace, ending: Ending, rng: &mut Rng) {
    if r.finish_reason == FinishReason::Abort {
        return;
    }
    content::fill(&mut r.tokens, ending, rng);
    r.finish_reason = match ending {
        Ending::Length => FinishReason::Length,
        _ => FinishReason::Stop,
    };
}

/// Gives a finished request of synthetic traffic its words. A request whose prompt is known (a
/// block-hash chain) is answered as greedy decoding would: the same prompt, the same words and
/// ending, whoever asks (so the same answer is given twice unless the engine changed); others
/// draw from `words`.
pub fn answer(r: &mut RequestTrace, words: &mut Rng) {
    match r
        .served
        .prefix_cache
        .as_ref()
        .and_then(|p| p.block_hashes.last())
    {
        Some(&prompt) => {
            let ending = traffic_ending(&format!("{prompt:x}"));
            give_words(r, ending, &mut Rng::new(prompt));
        }
        None => give_words(r, traffic_ending(&r.request_id), words),
    }
}

/// How synthetic or replayed traffic ends: on a confident EOS, or at max_tokens one time in five.
pub fn traffic_ending(id: &str) -> Ending {
    if id.bytes().map(u32::from).sum::<u32>() % 5 == 0 {
        Ending::Length
    } else {
        Ending::ConfidentEos
    }
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|k| format!("{prefix}-{k:02}")).collect()
}

/// Builds a scenario's traffic from its start time, and says what happened.
type Builder = fn(&mut Rng, Nanos) -> Scenario;

/// The scenarios, by name.
const BUILDERS: [(&str, Builder); 9] = [
    ("prefill-interrupts-decode", prefill_interrupts_decode),
    ("prefill-freezes-decode", prefill_freezes_decode),
    ("long-prompt-monopolizes", long_prompt_monopolizes),
    ("low-probability-eos", low_probability_eos),
    ("kv-preemption", kv_preemption),
    ("pd-kv-transfer-stall", pd_kv_transfer_stall),
    ("long-answer", long_answer),
    ("speculation-collapses", speculation_collapses),
    ("repetition-loop", repetition_loop),
];

/// The scenario `name` (one of `NAMES` or `EXTRA`) starting at `t0`.
pub fn build(name: &str, t0: Nanos, seed: u64) -> Option<Scenario> {
    let (_, builder) = BUILDERS.iter().find(|(n, _)| *n == name)?;
    let mut rng = Rng::new(seed);
    let mut s = builder(&mut rng, t0);
    s.truth.scenario = name.into();
    Some(s)
}

fn engine(configure: impl FnOnce(&mut EngineConfig)) -> EngineConfig {
    let mut cfg = EngineConfig::new(profile("llama-8b-h100").expect("profile exists"));
    configure(&mut cfg);
    cfg
}

fn confident(_: &str) -> Ending {
    Ending::ConfidentEos
}

/// An incident on `instance` and its healthy control on `control_instance`, both colocated and
/// ending confidently; the truth's victims, culprits and controls are the caller's.
#[allow(clippy::too_many_arguments)]
fn with_control(
    rng: &mut Rng,
    (instance, cfg, reqs): (&str, &EngineConfig, Vec<SimRequest>),
    (control_instance, ctl, creqs): (&str, &EngineConfig, Vec<SimRequest>),
    cause: &str,
    victims: Vec<String>,
    culprits: Vec<String>,
    controls: Vec<String>,
) -> Scenario {
    let run = simulate(instance, Role::Colocated, cfg, reqs, rng, &confident);
    let control = simulate(
        control_instance,
        Role::Colocated,
        ctl,
        creqs,
        rng,
        &confident,
    );
    Scenario {
        runs: vec![run, control],
        truth: Truth {
            scenario: String::new(),
            cause: cause.into(),
            instance: instance.into(),
            victims,
            culprits,
            culprits_of: Default::default(),
            controls,
            control_instance: control_instance.into(),
        },
    }
}

/// Colocated, no chunking, prefill priority: six 28k-token prompts, each a second of whole
/// steps, hold the engine while the decode-heavy request waits for its next token. The control runs the same traffic with
/// chunked prefill (512-token steps), which keeps decode flowing.
fn prefill_interrupts_decode(rng: &mut Rng, t0: Nanos) -> Scenario {
    let cfg = engine(|c| {
        c.chunked_prefill = false;
        c.token_budget = 16_384;
    });
    let ctl = engine(|c| c.token_budget = 512);
    let culprits = ids("pid-prefill", 6);
    let traffic =
        |victim: &str, prompt: &dyn Fn(usize) -> String| {
            let mut reqs = vec![SimRequest::new(victim, t0, 200, 100)];
            reqs.extend((0..6).map(|k| {
                SimRequest::new(prompt(k), t0 + 300 * MS + k as Nanos * 600 * MS, 28_000, 4)
            }));
            reqs
        };
    let reqs = traffic("pid-victim", &|k| culprits[k].clone());
    let creqs = traffic("pid-control", &|k| format!("pid-control-prefill-{k:02}"));
    with_control(
        rng,
        ("sim-pid", &cfg, reqs),
        ("sim-pid-control", &ctl, creqs),
        "prefill_interrupted_decode",
        vec!["pid-victim".into()],
        culprits,
        vec!["pid-control".into()],
    )
}

/// One 32k-token prompt, not chunked, takes a 1.5 s step in the middle of a 200-token answer:
/// the stream stops once, while the mean gap (TPOT) stays under the SLO. Chunked in 512-token
/// steps (the control), the same prompt never stops the stream.
fn prefill_freezes_decode(rng: &mut Rng, t0: Nanos) -> Scenario {
    let cfg = engine(|c| {
        c.chunked_prefill = false;
        c.token_budget = 40_000;
    });
    let ctl = engine(|c| c.token_budget = 512);
    let traffic = |victim: &str, prompt: &str| {
        vec![
            SimRequest::new(victim, t0, 300, 200),
            SimRequest::new(prompt, t0 + 600 * MS, 32_000, 4),
        ]
    };
    with_control(
        rng,
        ("sim-frz", &cfg, traffic("frz-victim", "frz-prompt")),
        (
            "sim-frz-control",
            &ctl,
            traffic("frz-control", "frz-control-prompt"),
        ),
        "prefill_interrupted_decode",
        vec!["frz-victim".into()],
        vec!["frz-prompt".into()],
        vec!["frz-control".into()],
    )
}

/// Chunked prefill with 20k-token steps: a 96k prompt holds five steps in a row while a short
/// request that arrived just after waits. The control is the short request alone.
fn long_prompt_monopolizes(rng: &mut Rng, t0: Nanos) -> Scenario {
    let cfg = engine(|c| c.token_budget = 20_000);
    let reqs = vec![
        SimRequest::new("lpm-long", t0, 96_000, 12),
        SimRequest::new("lpm-short", t0 + 50 * MS, 700, 40),
    ];
    let creqs = vec![SimRequest::new("lpm-control", t0 + 50 * MS, 700, 40)];
    with_control(
        rng,
        ("sim-lpm", &cfg, reqs),
        ("sim-lpm-control", &cfg, creqs),
        "prefill_monopolized",
        vec!["lpm-short".into()],
        vec!["lpm-long".into()],
        vec!["lpm-control".into()],
    )
}

/// Not an incident: one 8,000-token answer while a 2-8k-token prompt arrives every half second
/// around it (the request page's benchmark).
fn long_answer(rng: &mut Rng, t0: Nanos) -> Scenario {
    let mut reqs = vec![SimRequest::new("long-answer", t0, 1_000, 8_000)];
    reqs.extend((0..240).map(|k| {
        let prompt = 2_000 + rng.below(6_000) as u32;
        SimRequest::new(
            format!("la-chat-{k:03}"),
            t0 + 200 * MS + k * 500 * MS,
            prompt,
            150,
        )
    }));
    let run = simulate(
        "sim-long",
        Role::Colocated,
        &engine(|_| {}),
        reqs,
        rng,
        &confident,
    );
    Scenario {
        runs: vec![run],
        truth: Truth {
            scenario: String::new(),
            cause: "none".into(),
            instance: "sim-long".into(),
            victims: vec![],
            culprits: vec![],
            culprits_of: Default::default(),
            controls: vec![],
            control_instance: "sim-long".into(),
        },
    }
}

/// Chat traffic on an engine that speculates four draft tokens a step, each accepted with a
/// chance of 70 % (kept up to the first rejected one: 44 % of drafts), and one planted request.
fn speculative_traffic(
    prefix: &str,
    t0: Nanos,
    rng: &mut Rng,
    planted: SimRequest,
) -> Vec<SimRequest> {
    let mut reqs = vec![planted];
    reqs.extend((0..16).map(|k| {
        let prompt = 300 + rng.below(1_500) as u32;
        SimRequest::new(
            format!("{prefix}-chat-{k:02}"),
            t0 + k as Nanos * 150 * MS,
            prompt,
            160 + rng.below(120) as u32,
        )
    }));
    reqs
}

fn speculating() -> EngineConfig {
    engine(|c| {
        c.draft_tokens = 4;
        c.draft_acceptance = 0.7;
    })
}

/// A request whose drafts are nearly all rejected while its neighbours' are mostly accepted:
/// each of its steps verifies four drafts to keep about one token. The control runs the same
/// traffic with that request's drafts accepted as usual.
fn speculation_collapses(rng: &mut Rng, t0: Nanos) -> Scenario {
    let cfg = speculating();
    let victim = SimRequest {
        draft_acceptance: Some(0.08),
        ..SimRequest::new("spec-victim", t0 + 100 * MS, 600, 300)
    };
    let reqs = speculative_traffic("spec", t0, rng, victim);
    let creqs = speculative_traffic(
        "spec-ctl",
        t0,
        rng,
        SimRequest::new("spec-control", t0 + 100 * MS, 600, 300),
    );
    with_control(
        rng,
        ("sim-spec", &cfg, reqs),
        ("sim-spec-control", &cfg, creqs),
        "speculation_low_acceptance",
        vec!["spec-victim".into()],
        vec![],
        vec!["spec-control".into()],
    )
}

/// Where a repetition loop starts in `loop-victim`'s answer, and how long the repeated span is.
pub const LOOP_START: usize = 90;
pub const LOOP_PERIOD: usize = 7;

/// An answer that falls into a loop: from token 90 it repeats a seven-token span until
/// max_tokens cuts it, and the draft model, seeing the pattern, guesses 97 % of it. The control
/// is the same request answering normally.
fn repetition_loop(rng: &mut Rng, t0: Nanos) -> Scenario {
    let cfg = speculating();
    let victim = SimRequest {
        draft_acceptance: Some(0.97),
        ..SimRequest::new("loop-victim", t0 + 100 * MS, 800, 600)
    };
    let reqs = speculative_traffic("loop", t0, rng, victim);
    let creqs = speculative_traffic(
        "loop-ctl",
        t0,
        rng,
        SimRequest::new("loop-control", t0 + 100 * MS, 800, 600),
    );
    let endings = |id: &str| {
        if id == "loop-victim" {
            Ending::Length
        } else {
            Ending::ConfidentEos
        }
    };
    let mut run = simulate("sim-loop", Role::Colocated, &cfg, reqs, rng, &endings);
    let control = simulate(
        "sim-loop-control",
        Role::Colocated,
        &cfg,
        creqs,
        rng,
        &confident,
    );
    for r in &mut run.output.requests {
        if r.request_id == "loop-victim" {
            repeat(&mut r.tokens, LOOP_START, LOOP_PERIOD);
        }
    }
    Scenario {
        runs: vec![run, control],
        truth: Truth {
            scenario: String::new(),
            cause: "speculation_high_acceptance".into(),
            instance: "sim-loop".into(),
            victims: vec!["loop-victim".into()],
            culprits: vec![],
            culprits_of: Default::default(),
            controls: vec!["loop-control".into()],
            control_instance: "sim-loop-control".into(),
        },
    }
}

/// Makes the tokens from `start` on repeat the `period` tokens at `start` (their words and
/// probabilities; each keeps its own time).
fn repeat(tokens: &mut [tokenscope_core::model::Token], start: usize, period: usize) {
    for i in start + period..tokens.len() {
        let from = tokens[start + (i - start) % period].clone();
        let t = &mut tokens[i];
        t.token_id = from.token_id;
        t.text = from.text;
        t.logprob = from.logprob;
        t.rank = from.rank;
        t.special = from.special;
        t.candidates = from.candidates;
    }
}

/// Two identical requests; one ends on an EOS the model gave a probability of 0.1.
fn low_probability_eos(rng: &mut Rng, t0: Nanos) -> Scenario {
    let reqs = vec![
        SimRequest::new("eos-victim", t0, 300, 14),
        SimRequest::new("eos-control", t0 + 10 * MS, 300, 14),
    ];
    let endings = |id: &str| {
        if id == "eos-victim" {
            Ending::UnlikelyEos { p: 0.1 }
        } else {
            Ending::ConfidentEos
        }
    };
    let run = simulate(
        "sim-eos",
        Role::Colocated,
        &engine(|_| {}),
        reqs,
        rng,
        &endings,
    );
    Scenario {
        runs: vec![run],
        truth: Truth {
            scenario: String::new(),
            cause: "low_probability_eos".into(),
            instance: "sim-eos".into(),
            victims: vec!["eos-victim".into()],
            culprits: vec![],
            culprits_of: Default::default(),
            controls: vec!["eos-control".into()],
            control_instance: "sim-eos".into(),
        },
    }
}

/// 9,600 tokens of KV cache for eight requests that grow to 1,400 tokens each: the engine
/// preempts some (the victims are whichever it chose). The control has room for all.
fn kv_preemption(rng: &mut Rng, t0: Nanos) -> Scenario {
    let cfg = engine(|c| c.kv_blocks = 600);
    let ctl = engine(|c| c.kv_blocks = 40_000);
    let eight = |prefix: &str| -> Vec<SimRequest> {
        ids(prefix, 8)
            .iter()
            .enumerate()
            .map(|(k, id)| SimRequest::new(id, t0 + k as Nanos * MS, 1000, 400))
            .collect()
    };
    let mut s = with_control(
        rng,
        ("sim-kv", &cfg, eight("kv")),
        ("sim-kv-control", &ctl, eight("kv-control")),
        "kv_preempted",
        vec![],
        vec![],
        ids("kv-control", 8),
    );
    let preempted = s.runs[0]
        .output
        .requests
        .iter()
        .filter(|r| !r.preemptions.is_empty());
    for r in preempted {
        s.truth.victims.push(r.request_id.clone());
        // Whom the engine made room for when it preempted this one, each once.
        let mut by: Vec<String> = Vec::new();
        for a in r.preemptions.iter().filter_map(|p| p.aggressor.clone()) {
            if !by.contains(&a) {
                by.push(a);
            }
        }
        s.truth.culprits_of.insert(r.request_id.clone(), by);
    }
    s
}

/// PD-disaggregated: the prefill instance computes the prompt, the KV cache moves to the decode
/// instance, which produces the tokens. One transfer takes 2.5 s, the other 30 ms.
fn pd_kv_transfer_stall(rng: &mut Rng, t0: Nanos) -> Scenario {
    let cfg = engine(|_| {});
    let offered = vec![
        SimRequest::new("pd-slow", t0, 4000, 50),
        SimRequest::new("pd-fast", t0 + 20 * MS, 4000, 50),
    ];
    let prefill_side: Vec<SimRequest> = offered
        .iter()
        .map(|r| SimRequest {
            output_tokens: 1,
            ..r.clone()
        })
        .collect();
    let prefill_run = simulate(
        "sim-pd-prefill",
        Role::Prefill,
        &cfg,
        prefill_side,
        rng,
        &confident,
    );
    let mut decode_side = Vec::new();
    let mut transfers = Vec::new();
    for r in &offered {
        let done = prefill_run
            .output
            .requests
            .iter()
            .find(|p| p.request_id == r.id)
            .map_or(r.arrival_ns, |p| p.finished_ns);
        let transfer = if r.id == "pd-slow" {
            2500 * MS
        } else {
            30 * MS
        };
        transfers.push((
            r.id.clone(),
            KvTransfer {
                start_ns: done,
                end_ns: done + transfer,
                bytes: Some(u64::from(r.prompt_tokens) * 131_072),
                // 16-token blocks of 2 MiB (an 8B model's 128 KiB per token).
                blocks: Some(r.prompt_tokens.div_ceil(16)),
            },
        ));
        decode_side.push(SimRequest {
            ready_ns: done + transfer,
            kv_received: true,
            ..r.clone()
        });
    }
    let mut decode_run = simulate(
        "sim-pd-decode",
        Role::Decode,
        &cfg,
        decode_side,
        rng,
        &confident,
    );
    for r in &mut decode_run.output.requests {
        r.kv_transfer = transfers
            .iter()
            .find(|(id, _)| *id == r.request_id)
            .map(|(_, t)| t.clone());
    }
    Scenario {
        runs: vec![prefill_run, decode_run],
        truth: Truth {
            scenario: String::new(),
            cause: "kv_transfer_slow".into(),
            instance: "sim-pd-decode".into(),
            victims: vec!["pd-slow".into()],
            culprits: vec![],
            culprits_of: Default::default(),
            controls: vec!["pd-fast".into()],
            control_instance: "sim-pd-decode".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscope_core::analysis::metrics::request_metrics;
    use tokenscope_core::model::RequestTrace;

    const T0: Nanos = 1_796_022_000_000_000_000;

    fn find<'a>(s: &'a Scenario, instance: &str, id: &str) -> &'a RequestTrace {
        s.runs
            .iter()
            .filter(|r| r.resource.instance_id == instance)
            .flat_map(|r| &r.output.requests)
            .find(|r| r.request_id == id)
            .unwrap_or_else(|| panic!("{id} on {instance}"))
    }

    fn ms(ns: Option<Nanos>) -> f64 {
        ns.unwrap() as f64 / 1e6
    }

    #[test]
    fn every_listed_scenario_has_a_builder_and_every_builder_is_listed() {
        let mut listed: Vec<&str> = NAMES.iter().chain(&EXTRA).copied().collect();
        let mut built: Vec<&str> = BUILDERS.iter().map(|(n, _)| *n).collect();
        listed.sort_unstable();
        built.sort_unstable();
        assert_eq!(listed, built);
        for name in listed {
            assert_eq!(build(name, T0, 1).unwrap().truth.scenario, name);
        }
    }

    #[test]
    fn prefill_interrupts_decode_breaks_tpot_only_without_chunking() {
        let s = build("prefill-interrupts-decode", T0, 1).unwrap();
        let victim = request_metrics(find(&s, "sim-pid", "pid-victim"));
        let control = request_metrics(find(&s, "sim-pid-control", "pid-control"));
        assert!(
            ms(victim.tpot_ns) > 50.0,
            "victim TPOT {}",
            ms(victim.tpot_ns)
        );
        assert!(
            ms(control.tpot_ns) < 50.0,
            "control TPOT {}",
            ms(control.tpot_ns)
        );
    }

    #[test]
    fn long_prompt_holds_five_steps_and_delays_the_short_one() {
        let s = build("long-prompt-monopolizes", T0, 1).unwrap();
        let long = find(&s, "sim-lpm", "lpm-long");
        let iterations: Vec<u64> = long
            .prefill_chunks
            .iter()
            .filter_map(|c| c.iteration)
            .collect();
        assert_eq!(iterations.len(), 5);
        assert!(
            iterations.windows(2).all(|w| w[1] == w[0] + 1),
            "consecutive: {iterations:?}"
        );
        let short = request_metrics(find(&s, "sim-lpm", "lpm-short"));
        let queue_wait = find(&s, "sim-lpm", "lpm-short").first_token_at().unwrap()
            - find(&s, "sim-lpm", "lpm-short").arrival_ns;
        assert!(queue_wait > 2_000_000_000, "first-token wait {queue_wait}");
        assert!(ms(short.ttft_ns) > 2000.0);
        let control = request_metrics(find(&s, "sim-lpm-control", "lpm-control"));
        assert!(
            ms(control.ttft_ns) < 500.0,
            "control TTFT {}",
            ms(control.ttft_ns)
        );
    }

    /// The longest gap between a request's tokens, in ms.
    fn longest_gap(r: &RequestTrace) -> f64 {
        let t: Vec<Nanos> = r.tokens.iter().filter_map(|t| t.emitted_ns).collect();
        t.windows(2)
            .map(|w| ms(Some(w[1] - w[0])))
            .fold(0.0, f64::max)
    }

    #[test]
    fn an_unchunked_prompt_freezes_the_stream_once_under_a_fine_tpot() {
        let s = build("prefill-freezes-decode", T0, 1).unwrap();
        let victim = find(&s, "sim-frz", "frz-victim");
        let gap = longest_gap(victim);
        assert!((1200.0..2000.0).contains(&gap), "freeze {gap} ms");
        let tpot = ms(request_metrics(victim).tpot_ns);
        assert!(tpot < 50.0, "TPOT {tpot} hides it");
        let control = find(&s, "sim-frz-control", "frz-control");
        assert!(longest_gap(control) < 1000.0, "{}", longest_gap(control));
    }

    #[test]
    fn low_probability_eos_is_rank_two_at_ten_percent() {
        let s = build("low-probability-eos", T0, 1).unwrap();
        let last = find(&s, "sim-eos", "eos-victim")
            .tokens
            .last()
            .unwrap()
            .clone();
        assert_eq!(last.token_id, Some(content::EOS_ID));
        assert_eq!(last.rank, Some(2));
        assert!((last.logprob.unwrap().exp() - 0.1).abs() < 0.005);
        let ctl = find(&s, "sim-eos", "eos-control")
            .tokens
            .last()
            .unwrap()
            .clone();
        assert_eq!(ctl.rank, Some(1));
    }

    #[test]
    fn kv_pressure_preempts_and_the_control_does_not() {
        let s = build("kv-preemption", T0, 1).unwrap();
        assert!(!s.truth.victims.is_empty());
        for id in &s.truth.victims {
            let r = find(&s, "sim-kv", id);
            assert!(
                r.preemptions
                    .iter()
                    .all(|p| p.recompute && p.resumed_ns.is_some()),
                "{id}"
            );
            assert_eq!(r.tokens.len(), 400, "{id} still completes");
        }
        assert!(
            s.runs[1]
                .output
                .requests
                .iter()
                .all(|r| r.preemptions.is_empty())
        );
    }

    #[test]
    fn slow_kv_transfer_delays_the_first_token() {
        let s = build("pd-kv-transfer-stall", T0, 1).unwrap();
        let slow = find(&s, "sim-pd-decode", "pd-slow");
        let kv = slow.kv_transfer.clone().unwrap();
        assert!(kv.end_ns - kv.start_ns >= 2_500_000_000);
        assert!(ms(request_metrics(slow).ttft_ns) > 2500.0);
        let fast = request_metrics(find(&s, "sim-pd-decode", "pd-fast"));
        assert!(ms(fast.ttft_ns) < 1000.0, "fast TTFT {}", ms(fast.ttft_ns));
    }

    /// Draft tokens verified and accepted for `id`, and for the others, in `instance`'s steps.
    fn drafts(s: &Scenario, instance: &str, id: &str) -> ((u32, u32), (u32, u32)) {
        let (mut own, mut others) = ((0, 0), (0, 0));
        let run = s.runs.iter().find(|r| r.resource.instance_id == instance);
        for e in run
            .unwrap()
            .output
            .iterations
            .iter()
            .flat_map(|it| &it.batch)
        {
            if let Some(d) = e.draft {
                let t = if &*e.request_id == id {
                    &mut own
                } else {
                    &mut others
                };
                t.0 += d.proposed;
                t.1 += d.accepted;
            }
        }
        (own, others)
    }

    #[test]
    fn the_speculation_scenarios_plant_their_acceptance_and_their_loop() {
        let rate = |(p, a): (u32, u32)| f64::from(a) / f64::from(p);
        let s = build("speculation-collapses", T0, 1).unwrap();
        let (victim, others) = drafts(&s, "sim-spec", "spec-victim");
        // Drafts are kept up to the first rejected one: 70 % each keeps 44 % of four.
        assert!(
            rate(victim) < 0.05 && rate(others) > 0.35,
            "{victim:?} {others:?}"
        );
        let (control, _) = drafts(&s, "sim-spec-control", "spec-control");
        assert!(rate(control) > 0.35, "{control:?}");

        let s = build("repetition-loop", T0, 1).unwrap();
        let (victim, others) = drafts(&s, "sim-loop", "loop-victim");
        assert!(
            rate(victim) > 0.9 && rate(others) < 0.6,
            "{victim:?} {others:?}"
        );
        let t = &find(&s, "sim-loop", "loop-victim").tokens;
        assert_eq!(t.len(), 600);
        for i in LOOP_START + LOOP_PERIOD..t.len() {
            assert_eq!(t[i].token_id, t[i - LOOP_PERIOD].token_id, "token {i}");
        }
        // Before the loop, the answer is ordinary text.
        assert!((1..LOOP_START).any(|i| t[i].token_id != t[i - LOOP_PERIOD.min(i)].token_id));
    }

    #[test]
    fn every_scenario_is_valid_model_data_and_deterministic() {
        for name in NAMES {
            let a = build(name, T0, 7).unwrap();
            let b = build(name, T0, 7).unwrap();
            for (ra, rb) in a.runs.iter().zip(&b.runs) {
                assert_eq!(
                    ra.output.requests, rb.output.requests,
                    "{name} is deterministic"
                );
                for r in &ra.output.requests {
                    tokenscope_core::model::validate::request(r)
                        .unwrap_or_else(|e| panic!("{name} {}: {e}", r.request_id));
                }
                for it in &ra.output.iterations {
                    tokenscope_core::model::validate::iteration(it).unwrap();
                }
            }
        }
    }

    /// The findings worker reads a stored request's candidates for its last token only (the
    /// store's `Candidates::Last`): the diagnosis judges the end-of-sequence token against the
    /// likeliest candidate and every other token by its own probability and rank. Every
    /// scenario's diagnoses are the same with the other tokens' candidates dropped.
    #[test]
    fn the_diagnosis_reads_only_the_last_tokens_candidates() {
        use tokenscope_core::analysis::diagnosis::{
            Context, OtherRequest, Thresholds, diagnose, steps_of,
        };
        let th = Thresholds::default();
        let (mut dropped, mut words) = (0, 0);
        for name in NAMES.iter().chain(&EXTRA) {
            let s = build(name, T0, 1).unwrap();
            for run in &s.runs {
                let out = &run.output;
                let others: Vec<OtherRequest> = out.requests.iter().map(OtherRequest::of).collect();
                for r in &out.requests {
                    let ctx = Context::new(steps_of(&out.iterations, r), &others, None);
                    let mut lean = r.clone();
                    let last = lean.tokens.len().saturating_sub(1);
                    for t in &mut lean.tokens[..last] {
                        dropped += t.candidates.len();
                        t.candidates = Vec::new();
                    }
                    let d = diagnose(r, &ctx, &th);
                    words += d
                        .findings
                        .iter()
                        .filter(|f| f.cause.is_word_choice())
                        .count();
                    assert_eq!(d, diagnose(&lean, &ctx, &th), "{name}: {}", r.request_id);
                }
            }
        }
        assert!(
            dropped > 10_000 && words > 0,
            "{dropped} candidates, {words} word findings"
        );
    }

    /// Every scenario's requests (speculation's among them) diagnosed against their run's steps
    /// counted once (`Context::among`, as the findings worker does a page) get the diagnosis
    /// they get counted alone, findings that read the drafts included.
    #[test]
    fn steps_counted_once_give_each_scenarios_own_diagnoses() {
        use std::sync::Arc;
        use tokenscope_core::analysis::diagnosis::{
            Cause, Context, OtherRequest, StepSums, Thresholds, diagnose, steps_of,
        };
        let th = Thresholds::default();
        let (mut compared, mut speculation) = (0, 0);
        for name in NAMES.iter().chain(&EXTRA) {
            let s = build(name, T0, 1).unwrap();
            for run in &s.runs {
                let out = &run.output;
                let others: Vec<OtherRequest> = out.requests.iter().map(OtherRequest::of).collect();
                let page = Arc::new(StepSums::of(&out.iterations, None));
                for r in &out.requests {
                    let alone = diagnose(
                        r,
                        &Context::new(steps_of(&out.iterations, r), &others, None),
                        &th,
                    );
                    let among = diagnose(
                        r,
                        &Context::among(&out.iterations, &page, r, &others, None),
                        &th,
                    );
                    assert_eq!(among, alone, "{name}: {}", r.request_id);
                    compared += 1;
                    speculation += alone
                        .findings
                        .iter()
                        .filter(|f| f.cause == Cause::SpeculationLowAcceptance)
                        .count();
                }
            }
        }
        assert!(
            compared > 300 && speculation > 0,
            "{compared} compared, {speculation} speculation findings"
        );
    }
}
