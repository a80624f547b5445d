//! A discrete-event model of a continuous-batching engine: admission, token budget, chunked or
//! whole prefills, prefill-first or decode-first steps, a running cap, and a KV cache in blocks
//! with preemption (recompute) when it runs out. It records what a real engine would trace.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;

use tokenscope_core::model::{
    BatchEntry, Draft, FinishReason, Iteration, MAX_BLOCK_HASHES, Nanos, Phase, Preemption,
    PrefillChunk, PrefixCache, RequestTrace, Served, Token,
};

use crate::Rng;
use crate::cost::{Profile, StepLoad};
use crate::ledger::Ledger;
use crate::prefix::{self, Eviction, PrefixLru};

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub profile: &'static Profile,
    /// Most tokens (prefill + decode) one step may compute (vLLM `max_num_batched_tokens`).
    pub token_budget: u32,
    /// Split prompts into budget-sized chunks that run alongside decodes (vLLM V1, SGLang
    /// `--chunked-prefill-size`); otherwise a prompt is prefilled whole in one step.
    pub chunked_prefill: bool,
    /// Without chunking: a waiting prompt takes the next step and decodes pause (prefill
    /// priority, the colocated default); otherwise decodes go first.
    pub prefill_first: bool,
    pub max_running: usize,
    pub kv_blocks: u32,
    pub block_size: u32,
    /// Speculative decoding: draft tokens proposed for each decoding request per step (0: off),
    /// and the chance each is accepted (a step keeps the drafts up to the first rejected one,
    /// plus the token it samples itself).
    pub draft_tokens: u32,
    pub draft_acceptance: f64,
    /// Blocks the prefix cache keeps (0: no cache model; a request's `cached_tokens` is taken
    /// as given). With a cache, requests with `prompt_blocks` look their chain up when admitted.
    pub prefix_cache_blocks: u32,
    /// Keep each request's [`Ledger`] (where its time went), with the gaps between tokens
    /// longer than this; `None` keeps none (the work is per step and per live request).
    pub ledger_gaps_over: Option<Nanos>,
}

impl EngineConfig {
    pub fn new(profile: &'static Profile) -> Self {
        Self {
            profile,
            token_budget: 8192,
            chunked_prefill: true,
            prefill_first: true,
            max_running: 256,
            kv_blocks: 40_000,
            block_size: 16,
            draft_tokens: 0,
            draft_acceptance: 0.0,
            prefix_cache_blocks: 0,
            ledger_gaps_over: None,
        }
    }
}

/// A request as offered to the engine.
#[derive(Clone, Debug)]
pub struct SimRequest {
    pub id: String,
    pub arrival_ns: Nanos,
    /// When the engine may first schedule it (after a KV transfer, on a PD decode instance).
    pub ready_ns: Nanos,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    /// Prompt tokens already in the prefix cache.
    pub cached_tokens: u32,
    /// The prompt's KV arrives from elsewhere (PD decode instance): no prefill here.
    pub kv_received: bool,
    /// Speculative decoding: the chance each of its drafts is accepted, when it differs from
    /// the engine's usual (`EngineConfig::draft_acceptance`): text the draft model cannot
    /// guess, or an answer that repeats itself.
    pub draft_acceptance: Option<f64>,
    /// What its prompt's full blocks hold, one content id per block (see `prefix::chain`);
    /// empty: unknown, the prompt has no fingerprint and the prefix cache is not consulted.
    pub prompt_blocks: Vec<u64>,
}

impl SimRequest {
    /// A request ready when it arrives, nothing cached, prefilled here.
    pub fn new(
        id: impl Into<String>,
        arrival_ns: Nanos,
        prompt_tokens: u32,
        output_tokens: u32,
    ) -> Self {
        SimRequest {
            id: id.into(),
            arrival_ns,
            ready_ns: arrival_ns,
            prompt_tokens,
            output_tokens,
            cached_tokens: 0,
            kv_received: false,
            draft_acceptance: None,
            prompt_blocks: Vec::new(),
        }
    }
}

struct State {
    req: SimRequest,
    /// `req.id`, shared by the batch entries of every step that runs the request.
    batch_id: Arc<str>,
    /// Tokens that must be (re)computed before decoding: uncached prompt, plus generated tokens
    /// after a recompute preemption.
    to_prefill: u32,
    prefilled: u32,
    generated: u32,
    blocks: u32,
    first_scheduled: Option<Nanos>,
    chunks: Vec<PrefillChunk>,
    preemptions: Vec<Preemption>,
    tokens: Vec<Token>,
    finished: Option<Nanos>,
    aborted: bool,
    ledger: Ledger,
    /// Its prompt's block-hash chain (from `req.prompt_blocks`).
    chain: Vec<u64>,
}

impl State {
    fn context(&self) -> u32 {
        self.req.prompt_tokens + self.generated
    }
}

#[derive(Clone)]
pub struct Output {
    pub requests: Vec<RequestTrace>,
    pub iterations: Vec<Iteration>,
    /// What the prefix cache dropped, and for whom (empty without a cache model).
    pub evictions: Vec<Eviction>,
}

/// What the engine reports as it runs: each step when it ends, each request when it finishes.
pub enum Event {
    Step(Iteration),
    Finished(Box<RequestTrace>),
}

fn blocks_for(tokens: u32, block_size: u32) -> u32 {
    tokens.div_ceil(block_size)
}

/// Runs the engine over `requests` until all finish; `first_iteration` numbers the steps. The
/// requests come back in the order the engine received them (by `ready_ns`).
pub fn run(
    cfg: &EngineConfig,
    requests: Vec<SimRequest>,
    rng: &mut Rng,
    first_iteration: u64,
) -> Output {
    run_with_ledgers(cfg, requests, rng, first_iteration).0
}

/// [`run`], with each request's [`Ledger`] in the order of `Output::requests` (empty ones unless
/// `cfg.ledger_gaps_over` is set).
pub fn run_with_ledgers(
    cfg: &EngineConfig,
    requests: Vec<SimRequest>,
    rng: &mut Rng,
    first_iteration: u64,
) -> (Output, Vec<Ledger>) {
    let mut finished: Vec<Option<(RequestTrace, Ledger)>> = Vec::new();
    finished.resize_with(requests.len(), || None);
    let (mut iterations, mut evictions) = (Vec::new(), Vec::new());
    // Collecting never asks the engine to stop.
    let _ = simulate(cfg, requests, rng, first_iteration, &mut |e| {
        match e {
            Step::Ended(it) => iterations.push(it),
            Step::Finished(k, r, l) => finished[k] = Some((*r, l)),
            Step::Evicted(e) => evictions = e,
        }
        ControlFlow::Continue(())
    });
    let (requests, ledgers) = finished.into_iter().flatten().unzip();
    (
        Output {
            requests,
            iterations,
            evictions,
        },
        ledgers,
    )
}

/// Runs the engine over `requests`, handing out each step and each finished request as soon as
/// the engine produces it: memory stays bounded by what is running, whatever the duration.
/// `emit` may stop the run (`Break`, given back) when nobody wants the rest.
pub fn stream(
    cfg: &EngineConfig,
    requests: Vec<SimRequest>,
    rng: &mut Rng,
    first_iteration: u64,
    emit: &mut dyn FnMut(Event) -> ControlFlow<()>,
) -> ControlFlow<()> {
    simulate(cfg, requests, rng, first_iteration, &mut |e| match e {
        Step::Ended(it) => emit(Event::Step(it)),
        Step::Finished(_, r, _) => emit(Event::Finished(r)),
        Step::Evicted(_) => ControlFlow::Continue(()),
    })
}

/// An [`Event`] with the finished request's place in arrival order.
enum Step {
    Ended(Iteration),
    Finished(usize, Box<RequestTrace>, Ledger),
    /// The prefix cache's eviction log, once the run is over.
    Evicted(Vec<Eviction>),
}

/// A finished request's trace and ledger; its state keeps only what the scheduler still reads.
fn take_trace(s: &mut State, now: Nanos, block_size: u32) -> (Box<RequestTrace>, Ledger) {
    s.ledger.close(!s.tokens.is_empty());
    let ledger = std::mem::take(&mut s.ledger);
    let trace = Box::new(RequestTrace {
        request_id: std::mem::take(&mut s.req.id),
        arrival_ns: s.req.arrival_ns,
        queued_ns: Some(s.req.ready_ns),
        first_scheduled_ns: s.first_scheduled,
        first_token_ns: s.tokens.first().and_then(|t| t.emitted_ns),
        finished_ns: s.finished.unwrap_or(now),
        finish_reason: if s.aborted {
            FinishReason::Abort
        } else {
            FinishReason::Unknown
        },
        prompt_tokens: s.req.prompt_tokens,
        output_tokens: s.tokens.len() as u32,
        cached_tokens: s.req.cached_tokens.min(s.req.prompt_tokens),
        prefill_chunks: std::mem::take(&mut s.chunks),
        preemptions: std::mem::take(&mut s.preemptions),
        tokens: std::mem::take(&mut s.tokens),
        served: Served {
            prefix_cache: (!s.chain.is_empty()).then(|| PrefixCache {
                gpu_tokens: s.req.cached_tokens.min(s.req.prompt_tokens),
                block_size,
                block_hashes: s.chain[..s.chain.len().min(MAX_BLOCK_HASHES)].to_vec(),
                blocks: s.chain.len() as u32,
                ..PrefixCache::default()
            }),
            ..Served::default()
        },
        ..RequestTrace::default()
    });
    (trace, ledger)
}

/// The engine between steps: every request's state, the queue, the running set, the free KV
/// blocks and the clock.
struct Engine<'a> {
    cfg: &'a EngineConfig,
    states: Vec<State>,
    /// Requests before this index have reached the engine.
    next_arrival: usize,
    waiting: VecDeque<usize>,
    running: Vec<usize>,
    free_blocks: u32,
    now: Nanos,
    iteration_id: u64,
    cache: PrefixLru,
}

/// What one step computes: prompt tokens per prefilling request, one token per decoding one.
struct Work {
    prefill: Vec<(usize, u32)>,
    decode: Vec<usize>,
}

fn simulate(
    cfg: &EngineConfig,
    mut requests: Vec<SimRequest>,
    rng: &mut Rng,
    first_iteration: u64,
    emit: &mut dyn FnMut(Step) -> ControlFlow<()>,
) -> ControlFlow<()> {
    requests.sort_by_key(|r| r.ready_ns);
    let mut e = Engine::new(cfg, requests, first_iteration);
    loop {
        e.arrive();
        if e.running.is_empty() && e.waiting.is_empty() {
            match e.states.get(e.next_arrival) {
                Some(s) => {
                    e.now = s.req.ready_ns;
                    continue;
                }
                None => break,
            }
        }
        let admitted = e.admit(emit)?;
        let mut work = e.choose_work();
        e.grow_or_preempt(&mut work);
        if work.prefill.is_empty() && work.decode.is_empty() {
            // Everything was preempted or blocked: wait for the next arrival or retry.
            e.now += 1_000_000;
            continue;
        }
        e.step(&admitted, &work, rng, emit)?;
    }
    // Every request has finished or been aborted by now; this only guards against a request the
    // loop above never reached.
    let now = e.now;
    for (i, s) in e.states.iter_mut().enumerate() {
        if !s.req.id.is_empty() {
            let (r, l) = take_trace(s, now, cfg.block_size);
            emit(Step::Finished(i, r, l))?;
        }
    }
    emit(Step::Evicted(std::mem::take(&mut e.cache.evictions)))
}

impl<'a> Engine<'a> {
    fn new(cfg: &'a EngineConfig, requests: Vec<SimRequest>, first_iteration: u64) -> Self {
        let states: Vec<State> = requests
            .into_iter()
            .map(|req| State {
                batch_id: Arc::from(req.id.as_str()),
                to_prefill: if req.kv_received {
                    0
                } else {
                    req.prompt_tokens - req.cached_tokens.min(req.prompt_tokens)
                },
                prefilled: 0,
                generated: 0,
                blocks: 0,
                first_scheduled: None,
                chunks: Vec::new(),
                preemptions: Vec::new(),
                tokens: Vec::new(),
                finished: None,
                aborted: false,
                ledger: Ledger::default(),
                chain: prefix::chain(&req.prompt_blocks),
                req,
            })
            .collect();
        Engine {
            cfg,
            now: states.first().map_or(0, |s| s.req.ready_ns),
            states,
            next_arrival: 0,
            waiting: VecDeque::new(),
            running: Vec::new(),
            free_blocks: cfg.kv_blocks,
            iteration_id: first_iteration,
            cache: PrefixLru::new(cfg.prefix_cache_blocks),
        }
    }

    /// Requests that have become ready join the queue.
    fn arrive(&mut self) {
        while self.next_arrival < self.states.len()
            && self.states[self.next_arrival].req.ready_ns <= self.now
        {
            self.waiting.push_back(self.next_arrival);
            self.next_arrival += 1;
        }
    }

    /// Admission: the head of the queue joins when a slot and its KV blocks are free. Returns the
    /// requests admitted now.
    fn admit(
        &mut self,
        emit: &mut dyn FnMut(Step) -> ControlFlow<()>,
    ) -> ControlFlow<(), Vec<usize>> {
        let (cfg, now) = (self.cfg, self.now);
        let mut admitted = Vec::new();
        while let Some(&i) = self.waiting.front() {
            let need = blocks_for(self.states[i].context().max(1), cfg.block_size);
            if need > cfg.kv_blocks {
                // It can never fit: a real engine rejects it; waiting would stall forever.
                self.waiting.pop_front();
                self.states[i].finished = Some(now);
                self.states[i].aborted = true;
                let (r, l) = take_trace(&mut self.states[i], now, cfg.block_size);
                emit(Step::Finished(i, r, l))?;
                continue;
            }
            if self.running.len() >= cfg.max_running || need > self.free_blocks {
                break;
            }
            self.waiting.pop_front();
            self.look_up_prefix(i);
            self.free_blocks -= need;
            self.states[i].blocks = need;
            self.running.push(i);
            admitted.push(i);
            if let Some(p) = self.states[i].preemptions.last_mut() {
                p.resumed_ns.get_or_insert(now);
            }
        }
        ControlFlow::Continue(admitted)
    }

    /// A fresh prompt's cached blocks, with a cache model: its leading blocks the cache holds
    /// now need no prefill (the last token is always computed, to sample from).
    fn look_up_prefix(&mut self, i: usize) {
        let s = &mut self.states[i];
        let fresh = s.first_scheduled.is_none() && s.preemptions.is_empty();
        if self.cfg.prefix_cache_blocks == 0 || s.chain.is_empty() || s.req.kv_received || !fresh {
            return;
        }
        let hits = self.cache.hits(&s.chain) as u32;
        let prompt = s.req.prompt_tokens;
        s.req.cached_tokens = (hits * self.cfg.block_size).min(prompt.saturating_sub(1));
        s.to_prefill = prompt - s.req.cached_tokens;
    }

    /// The step's work: with chunking, every decode and prompt chunks up to the token budget;
    /// without, whole prompts (decodes paused, under prefill priority) or the decodes.
    fn choose_work(&self) -> Work {
        let (cfg, states) = (self.cfg, &self.states);
        let (prefilling, decoding): (Vec<usize>, Vec<usize>) = self
            .running
            .iter()
            .partition(|&&i| states[i].prefilled < states[i].to_prefill);
        let mut work = Work {
            prefill: Vec::new(),
            decode: Vec::new(),
        };
        if cfg.chunked_prefill {
            work.decode = decoding;
            let mut budget = cfg.token_budget.saturating_sub(work.decode.len() as u32);
            for &i in &prefilling {
                if budget == 0 {
                    break;
                }
                let n = (states[i].to_prefill - states[i].prefilled).min(budget);
                work.prefill.push((i, n));
                budget -= n;
            }
        } else if !prefilling.is_empty() && (cfg.prefill_first || decoding.is_empty()) {
            // Whole prompts; the first always runs, others while they fit the budget.
            let mut used = 0;
            for &i in &prefilling {
                let n = states[i].to_prefill - states[i].prefilled;
                if used > 0 && used + n > cfg.token_budget {
                    continue;
                }
                work.prefill.push((i, n));
                used += n;
            }
        } else {
            work.decode = decoding;
        }
        work
    }

    /// Decodes that need a new KV block take a free one, or preempt the newest running request
    /// (recompute: it goes back to the head of the queue).
    fn grow_or_preempt(&mut self, work: &mut Work) {
        let mut k = 0;
        while k < work.decode.len() {
            let i = work.decode[k];
            let need = blocks_for(
                self.states[i].context() + 1 + self.cfg.draft_tokens,
                self.cfg.block_size,
            );
            if need <= self.states[i].blocks {
                k += 1;
                continue;
            }
            if self.free_blocks > 0 {
                self.free_blocks -= 1;
                self.states[i].blocks += 1;
                k += 1;
                continue;
            }
            let states = &self.states;
            let victim = *self
                .running
                .iter()
                .max_by_key(|&&j| (states[j].req.ready_ns, j))
                .expect("running is not empty");
            self.running.retain(|&j| j != victim);
            work.decode.retain(|&j| j != victim);
            work.prefill.retain(|&(j, _)| j != victim);
            self.free_blocks += self.states[victim].blocks;
            // The decode that needed the block, unless it was the newest and gave up its own.
            let aggressor = (victim != i).then(|| self.states[i].req.id.clone());
            let s = &mut self.states[victim];
            s.blocks = 0;
            // Recompute: the prompt and everything generated so far must be prefilled again.
            let computed = s.context();
            s.to_prefill = s.req.prompt_tokens + s.generated;
            s.prefilled = 0;
            s.preemptions.push(Preemption {
                at_ns: self.now,
                resumed_ns: None,
                recompute: true,
                aggressor,
                recompute_tokens: Some(computed),
            });
            self.waiting.push_front(victim);
            // Indices moved; check the remaining decodes again (those already grown pass).
            k = 0;
        }
    }

    /// Runs `work` as one step: its time from the cost model (with jitter), the tokens it makes,
    /// the requests it finishes; reports the step, then those requests.
    fn step(
        &mut self,
        admitted: &[usize],
        work: &Work,
        rng: &mut Rng,
        emit: &mut dyn FnMut(Step) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let (cfg, now, iteration_id) = (self.cfg, self.now, self.iteration_id);
        let load = StepLoad {
            prefill: work
                .prefill
                .iter()
                .map(|&(i, n)| (n, self.states[i].prefilled))
                .collect(),
            decode_contexts: work
                .decode
                .iter()
                .map(|&i| self.states[i].context())
                .collect(),
            draft_tokens: cfg.draft_tokens * work.decode.len() as u32,
        };
        let base = cfg.profile.step_ns(&load) as f64;
        let noise = (rng.below(2001) as f64 / 1000.0 - 1.0) * cfg.profile.jitter * 1.7;
        let end = now + (base * (1.0 + noise)).max(1.0) as Nanos;
        if cfg.ledger_gaps_over.is_some() {
            self.account(work, &load, end);
        }
        let mut batch = self.prefill(&work.prefill, end);
        batch.extend(self.decode(&work.decode, end, rng));
        let done = self.finish(admitted, work, end);
        let batch_size = batch.len() as u32;
        emit(Step::Ended(Iteration {
            iteration_id,
            start_ns: now,
            end_ns: end,
            batch,
            running: (self.running.len() as u32).max(batch_size),
            waiting: self.waiting.len() as u32,
            kv_cache_usage: 1.0 - self.free_blocks as f32 / cfg.kv_blocks.max(1) as f32,
        }))?;
        // Reported after the step that finished them, as an engine's tracer would.
        for i in done {
            let (r, l) = take_trace(&mut self.states[i], now, cfg.block_size);
            emit(Step::Finished(i, r, l))?;
        }
        self.iteration_id += 1;
        self.now = end;
        ControlFlow::Continue(())
    }

    /// A token the step [now, end) sampled.
    fn token(&self, end: Nanos) -> Token {
        Token {
            emitted_ns: Some(end),
            scheduled_ns: Some(self.now),
            iteration: Some(self.iteration_id),
            ..Token::default()
        }
    }

    /// The step's prompt chunks: each request's entry, its chunk's times, and the first token
    /// when the chunk completes a fresh prompt.
    fn prefill(&mut self, prefill: &[(usize, u32)], end: Nanos) -> Vec<BatchEntry> {
        let (cfg, now, iteration_id) = (self.cfg, self.now, self.iteration_id);
        let token = self.token(end);
        let mut batch = Vec::with_capacity(prefill.len());
        for &(i, n) in prefill {
            let s = &mut self.states[i];
            s.first_scheduled.get_or_insert(now);
            batch.push(BatchEntry {
                request_id: s.batch_id.clone(),
                phase: Phase::Prefill,
                tokens: n,
                prefill_offset: s.prefilled,
                draft: None,
            });
            if s.generated == 0 {
                s.chunks.push(PrefillChunk {
                    start_ns: now,
                    end_ns: end,
                    tokens: n,
                    iteration: Some(iteration_id),
                });
            }
            s.prefilled += n;
            // The step that completes a fresh prompt samples the first token.
            if s.prefilled >= s.to_prefill && s.generated == 0 {
                if cfg.prefix_cache_blocks > 0 {
                    self.cache.store(&s.chain, &s.req.id, end);
                }
                s.generated = 1;
                s.tokens.push(token.clone());
                if let Some(keep) = cfg.ledger_gaps_over {
                    s.ledger.token(None, end, keep);
                }
            }
        }
        batch
    }

    /// The step's decodes: each request's entry and the tokens it kept (with speculation, the
    /// accepted drafts and the target model's own token after them).
    fn decode(&mut self, decode: &[usize], end: Nanos, rng: &mut Rng) -> Vec<BatchEntry> {
        let (cfg, now) = (self.cfg, self.now);
        let token = self.token(end);
        let mut batch = Vec::with_capacity(decode.len());
        for &i in decode {
            let acceptance = self.states[i]
                .req
                .draft_acceptance
                .unwrap_or(cfg.draft_acceptance);
            let accepted = (0..cfg.draft_tokens)
                .take_while(|_| (rng.below(1_000_000) as f64) < acceptance * 1e6)
                .count() as u32;
            let s = &mut self.states[i];
            let n = (1 + accepted).min(s.req.output_tokens.saturating_sub(s.generated).max(1));
            s.first_scheduled.get_or_insert(now);
            // It computed its token and every draft; it kept the accepted ones and the target
            // model's own token after them.
            batch.push(BatchEntry {
                request_id: s.batch_id.clone(),
                phase: Phase::Decode,
                tokens: 1 + cfg.draft_tokens,
                prefill_offset: 0,
                draft: (cfg.draft_tokens > 0).then_some(Draft {
                    proposed: cfg.draft_tokens,
                    accepted: n - 1,
                }),
            });
            for _ in 0..n {
                s.generated += 1;
                let previous = s.tokens.last().and_then(|t| t.emitted_ns);
                s.tokens.push(token.clone());
                if let Some(keep) = cfg.ledger_gaps_over {
                    s.ledger.token(previous, end, keep);
                }
            }
        }
        batch
    }

    /// The requests the step finished: their blocks are freed and they leave the running set.
    fn finish(&mut self, admitted: &[usize], work: &Work, end: Nanos) -> Vec<usize> {
        let mut done = Vec::new();
        for &i in admitted
            .iter()
            .chain(work.prefill.iter().map(|(i, _)| i))
            .chain(&work.decode)
        {
            let s = &mut self.states[i];
            if s.finished.is_none() && s.generated >= s.req.output_tokens {
                s.finished = Some(end);
                self.free_blocks += s.blocks;
                s.blocks = 0;
                self.running.retain(|&j| j != i);
                done.push(i);
            }
        }
        done
    }

    /// Splits the step [now, end) over every request alive in it (queued, running, paused, or
    /// arrived during it): the part its prefills added to the decodes' cost goes to the
    /// prefilling requests in proportion to their compute, the rest to the engine.
    fn account(&mut self, work: &Work, load: &StepLoad, end: Nanos) {
        let (profile, now) = (self.cfg.profile, self.now);
        let full = profile.step_ns(load) as f64;
        let decodes = profile.step_ns(&StepLoad {
            prefill: Vec::new(),
            decode_contexts: load.decode_contexts.clone(),
            draft_tokens: load.draft_tokens,
        }) as f64;
        let prefill_fraction = if full > 0.0 {
            ((full - decodes) / full).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let weights: Vec<f64> = load
            .prefill
            .iter()
            .map(|&(n, offset)| profile.prefill_flops(n, offset))
            .collect();
        let total: f64 = weights.iter().sum::<f64>().max(f64::MIN_POSITIVE);
        let prefills: Vec<(usize, Arc<str>, f64)> = work
            .prefill
            .iter()
            .zip(&weights)
            .map(|(&(i, _), &w)| (i, self.states[i].batch_id.clone(), w / total))
            .collect();
        let arrived = (self.next_arrival..self.states.len())
            .take_while(|&i| self.states[i].req.ready_ns < end);
        let alive: Vec<usize> = self
            .waiting
            .iter()
            .chain(&self.running)
            .copied()
            .chain(arrived)
            .collect();
        for r in alive {
            let s = &mut self.states[r];
            let d = (end - now.max(s.req.ready_ns)) as f64;
            if d <= 0.0 {
                continue;
            }
            let prefill = d * prefill_fraction;
            let open = &mut s.ledger.open;
            open.rest += d - prefill;
            for (i, id, share) in &prefills {
                if *i == r {
                    open.own_prefill += prefill * share;
                } else {
                    *open.others.entry(id.clone()).or_default() += prefill * share;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::profile;

    fn req(id: &str, prompt: u32, output: u32) -> SimRequest {
        SimRequest::new(id, 0, prompt, output)
    }

    #[test]
    fn a_request_larger_than_the_kv_cache_is_aborted_not_waited_for() {
        let mut cfg = EngineConfig::new(profile("llama-8b-h100").unwrap());
        cfg.kv_blocks = 100; // 1,600 tokens
        let out = run(
            &cfg,
            vec![req("huge", 5000, 10), req("small", 100, 10)],
            &mut Rng::new(1),
            1,
        );
        let huge = out
            .requests
            .iter()
            .find(|r| r.request_id == "huge")
            .unwrap();
        assert_eq!(huge.finish_reason, FinishReason::Abort);
        assert!(huge.tokens.is_empty());
        let small = out
            .requests
            .iter()
            .find(|r| r.request_id == "small")
            .unwrap();
        assert_eq!(small.tokens.len(), 10);
    }

    #[test]
    fn streaming_hands_out_requests_as_they_finish_and_matches_a_full_run() {
        let cfg = EngineConfig::new(profile("llama-8b-h100").unwrap());
        let reqs: Vec<SimRequest> = (0..40)
            .map(|k| {
                let mut r = req(&format!("r{k:02}"), 200 + k * 10, 20);
                r.arrival_ns = k as Nanos * 50_000_000;
                r.ready_ns = r.arrival_ns;
                r
            })
            .collect();
        let full = run(&cfg, reqs.clone(), &mut Rng::new(4), 1);
        let mut events = Vec::new();
        let flow = stream(&cfg, reqs, &mut Rng::new(4), 1, &mut |e| {
            events.push(e);
            ControlFlow::Continue(())
        });
        assert!(flow.is_continue());
        let steps = events
            .iter()
            .filter(|e| matches!(e, Event::Step(_)))
            .count();
        let first_finished = events
            .iter()
            .position(|e| matches!(e, Event::Finished(_)))
            .unwrap();
        assert_eq!(steps, full.iterations.len());
        assert!(
            first_finished < events.len() / 4,
            "the first request is handed out at event {first_finished} of {}",
            events.len()
        );
        let mut streamed: Vec<RequestTrace> = events
            .into_iter()
            .filter_map(|e| match e {
                Event::Finished(r) => Some(*r),
                Event::Step(_) => None,
            })
            .collect();
        streamed.sort_by(|a, b| a.request_id.cmp(&b.request_id));
        assert_eq!(streamed, full.requests);
    }

    #[test]
    fn every_token_comes_from_a_recorded_iteration() {
        let cfg = EngineConfig::new(profile("llama-8b-h100").unwrap());
        let reqs = (0..20)
            .map(|k| req(&format!("r{k}"), 300 + k * 50, 30))
            .collect();
        let out = run(&cfg, reqs, &mut Rng::new(2), 100);
        let ids: std::collections::HashSet<u64> =
            out.iterations.iter().map(|i| i.iteration_id).collect();
        for r in &out.requests {
            assert_eq!(r.tokens.len(), 30);
            for t in &r.tokens {
                assert!(ids.contains(&t.iteration.unwrap()));
                assert!(t.scheduled_ns.unwrap() <= t.emitted_ns.unwrap());
            }
        }
    }
}
