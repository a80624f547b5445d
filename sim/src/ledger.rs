//! Where each request's time went, as the simulated engine spent it: its own prefill, each other
//! request's prefill, and the rest of the engine's work (decodes, overhead), before its first
//! token and in each long gap between two tokens. The engine keeps it when asked
//! (`EngineConfig::ledger_gaps_over`); it is the truth the accuracy benchmark scores the
//! diagnosis against, and the diagnosis never sees it.
//!
//! A step's time is split by what it computed: the part its prefills added (the step's modelled
//! cost minus the cost of its decodes alone) goes to the prefilling requests in proportion to
//! their compute, the rest to the engine. Every request alive during the step (queued, running,
//! paused) spent its overlap with the step that way.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokenscope_core::model::Nanos;

/// Time spent, in nanoseconds (fractional: a step is shared).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spent {
    /// Computing this request's own prompt.
    pub own_prefill: f64,
    /// Computing other requests' prompts, by request id.
    pub others: BTreeMap<Arc<str>, f64>,
    /// Everything else: decodes (its own and others'), overhead, idle queueing.
    pub rest: f64,
}

impl Spent {
    pub fn total(&self) -> f64 {
        self.own_prefill + self.others_total() + self.rest
    }

    pub fn others_total(&self) -> f64 {
        self.others.values().sum()
    }

    /// Other requests whose prefill took at least `fraction` of `of`, largest first.
    pub fn material(&self, of: f64, fraction: f64) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = self
            .others
            .iter()
            .filter(|&(_, &t)| t >= fraction * of)
            .map(|(id, &t)| (id.to_string(), t))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out
    }

    /// Adds `other`'s time to this.
    pub fn add(&mut self, other: &Spent) {
        self.own_prefill += other.own_prefill;
        self.rest += other.rest;
        for (id, t) in &other.others {
            *self.others.entry(id.clone()).or_default() += t;
        }
    }
}

/// One request's time, by phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ledger {
    /// From arrival to the first token (or to the end, when none came).
    pub first_token: Spent,
    /// From the first token to the last.
    pub decode: Spent,
    /// The gaps between consecutive tokens longer than the engine's `ledger_gaps_over`:
    /// (previous token, this token, what was spent in between).
    pub long_gaps: Vec<(Nanos, Nanos, Spent)>,
    /// Spent since the last token (or arrival), not yet closed by a token.
    pub(crate) open: Spent,
}

impl Ledger {
    /// A token came at `at`; the previous one at `previous` (none: this is the first).
    pub(crate) fn token(&mut self, previous: Option<Nanos>, at: Nanos, keep_over: Nanos) {
        let spent = std::mem::take(&mut self.open);
        match previous {
            None => self.first_token = spent,
            Some(p) => {
                self.decode.add(&spent);
                if at - p > keep_over {
                    self.long_gaps.push((p, at, spent));
                }
            }
        }
    }

    /// The request ended: what was spent without a token closing it belongs to the phase it
    /// was in.
    pub(crate) fn close(&mut self, had_token: bool) {
        let spent = std::mem::take(&mut self.open);
        if had_token {
            self.decode.add(&spent);
        } else {
            self.first_token = spent;
        }
    }
}
