//! Same prompt, different answer: the data-plane A/B. Requests whose prompts have equal keys
//! (the engine's block-hash chain, its length and the prompt's length) asked on both sides of a
//! comparison are paired, one request of each side per prompt, and their answers compared token
//! by token: how often they differ, and where they first part. Repeated prompts within side A
//! are paired the same way as the control: with sampling, answers differ anyway, and the
//! control says how often they do without any change.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::model::Nanos;

/// At most this many prompts are compared per side pair (each costs two answers read).
pub const MAX_PAIRS: usize = 100;
/// Tokens of context shown before the first difference in the example.
pub const CONTEXT_BEFORE: usize = 8;
pub const CONTEXT_AFTER: usize = 4;

/// A request with a known prompt, as the store lists them (oldest first).
#[derive(Clone, Debug)]
pub struct Asked {
    pub key: String,
    pub instance: String,
    pub request_id: String,
    pub arrival_ns: Nanos,
}

/// The pairs to read: across the sides (A's first and B's first request of each prompt both
/// were asked), and within A (its first two of each prompt it was asked twice); indices into
/// the lists given; and how many prompts both sides asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub prompts_both: u64,
    pub across: Vec<(usize, usize)>,
    pub within_a: Vec<(usize, usize)>,
}

pub fn plan(a: &[Asked], b: &[Asked]) -> Plan {
    let mut first_a: HashMap<&str, usize> = HashMap::new();
    let mut second_a: HashMap<&str, usize> = HashMap::new();
    for (i, r) in a.iter().enumerate() {
        if first_a.contains_key(r.key.as_str()) {
            second_a.entry(&r.key).or_insert(i);
        } else {
            first_a.insert(&r.key, i);
        }
    }
    let mut seen_b: HashMap<&str, usize> = HashMap::new();
    let mut across = Vec::new();
    for (j, r) in b.iter().enumerate() {
        if seen_b.contains_key(r.key.as_str()) {
            continue;
        }
        seen_b.insert(&r.key, j);
        if let Some(&i) = first_a.get(r.key.as_str()) {
            across.push((i, j));
        }
    }
    let prompts_both = across.len() as u64;
    across.truncate(MAX_PAIRS);
    let mut within_a: Vec<(usize, usize)> = second_a
        .iter()
        .map(|(k, &second)| (first_a[k], second))
        .collect();
    within_a.sort_unstable();
    within_a.truncate(MAX_PAIRS);
    Plan {
        prompts_both,
        across,
        within_a,
    }
}

/// The first position where two answers differ (a token, or one of them ending while the other
/// goes on); `None` when they are the same. Tokens without an id compare as different.
pub fn first_divergence(x: &[Option<u32>], y: &[Option<u32>]) -> Option<usize> {
    let same = x
        .iter()
        .zip(y)
        .take_while(|(p, q)| p.is_some() && p == q)
        .count();
    (same < x.len().max(y.len())).then_some(same)
}

/// How the answers to the same prompts compare (`Comparison::answers`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerDrift {
    /// Prompts asked on both sides; `compared` of them were (at most [`MAX_PAIRS`]).
    pub prompts_both: u64,
    pub compared: u64,
    /// Of the compared, how many answers differed, and where they first did (token position:
    /// quartiles), as a share of A's answer length too (median).
    pub differ: u64,
    pub position: Option<[u32; 3]>,
    pub position_share: Option<f64>,
    /// The control: A's repeated prompts, its first two answers each.
    pub within_a_compared: u64,
    pub within_a_differ: u64,
    /// The pair whose answers part at the median position: both requests and the tokens around
    /// where they part.
    pub example: Option<AnswerPair>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerPair {
    pub a: AnswerRef,
    pub b: AnswerRef,
    /// The first position where they differ.
    pub position: u32,
    /// Token texts of each answer from `context_from` up to a few past `position`.
    pub context_from: u32,
    pub a_context: Vec<String>,
    pub b_context: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerRef {
    pub request_id: String,
    pub instance: String,
    pub arrival_ns: Nanos,
    pub tokens: u32,
}

/// A compared pair: the two requests (indices into A and B, or A and A) and their answers' token
/// ids.
pub struct Compared<'a> {
    pub a: usize,
    pub b: usize,
    pub a_ids: &'a [Option<u32>],
    pub b_ids: &'a [Option<u32>],
}

/// The drift over the compared pairs; the example's context texts are the caller's to fill
/// (`example.position` says where).
pub fn drift(
    a: &[Asked],
    b: &[Asked],
    plan: &Plan,
    across: &[Compared],
    within_a: &[Compared],
) -> AnswerDrift {
    let mut parted: Vec<(usize, &Compared)> = across
        .iter()
        .filter_map(|c| first_divergence(c.a_ids, c.b_ids).map(|p| (p, c)))
        .collect();
    parted.sort_by_key(|(p, c)| (*p, c.a, c.b));
    let quartile = |q: usize| parted[(parted.len() - 1) * q / 4].0 as u32;
    let position = (!parted.is_empty()).then(|| [quartile(1), quartile(2), quartile(3)]);
    let mut shares: Vec<f64> = parted
        .iter()
        .filter(|(_, c)| !c.a_ids.is_empty())
        .map(|(p, c)| *p as f64 / c.a_ids.len() as f64)
        .collect();
    shares.sort_by(f64::total_cmp);
    let example = parted
        .get(parted.len().saturating_sub(1) / 2)
        .map(|&(p, c)| {
            let r = |x: &Asked, ids: &[Option<u32>]| AnswerRef {
                request_id: x.request_id.clone(),
                instance: x.instance.clone(),
                arrival_ns: x.arrival_ns,
                tokens: ids.len() as u32,
            };
            AnswerPair {
                a: r(&a[c.a], c.a_ids),
                b: r(&b[c.b], c.b_ids),
                position: p as u32,
                context_from: p.saturating_sub(CONTEXT_BEFORE) as u32,
                a_context: Vec::new(),
                b_context: Vec::new(),
            }
        });
    AnswerDrift {
        prompts_both: plan.prompts_both,
        compared: across.len() as u64,
        differ: parted.len() as u64,
        position,
        position_share: shares.get(shares.len().saturating_sub(1) / 2).copied(),
        within_a_compared: within_a.len() as u64,
        within_a_differ: within_a
            .iter()
            .filter(|c| first_divergence(c.a_ids, c.b_ids).is_some())
            .count() as u64,
        example,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(key: &str, id: &str) -> Asked {
        Asked {
            key: key.into(),
            instance: "i".into(),
            request_id: id.into(),
            arrival_ns: 0,
        }
    }

    #[test]
    fn answers_part_where_a_token_differs_or_one_ends() {
        let ids = |v: &[u32]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
        assert_eq!(first_divergence(&ids(&[1, 2, 3]), &ids(&[1, 2, 3])), None);
        assert_eq!(
            first_divergence(&ids(&[1, 2, 3]), &ids(&[1, 9, 3])),
            Some(1)
        );
        assert_eq!(first_divergence(&ids(&[1, 2, 3]), &ids(&[1, 2])), Some(2));
        assert_eq!(first_divergence(&[], &ids(&[1])), Some(0));
        // Without ids nothing can be said to be the same.
        assert_eq!(first_divergence(&[None], &[None]), Some(0));
    }

    #[test]
    fn each_prompt_is_paired_once_and_repeats_within_a_are_the_control() {
        let a = vec![
            asked("p", "a0"),
            asked("q", "a1"),
            asked("p", "a2"),
            asked("p", "a3"),
        ];
        let b = vec![asked("r", "b0"), asked("p", "b1"), asked("p", "b2")];
        let plan = plan(&a, &b);
        assert_eq!(plan.prompts_both, 1);
        assert_eq!(plan.across, vec![(0, 1)]);
        assert_eq!(plan.within_a, vec![(0, 2)]);

        let x = [Some(1), Some(2), Some(3), Some(4)];
        let y = [Some(1), Some(2)];
        let across = [Compared {
            a: 0,
            b: 1,
            a_ids: &x,
            b_ids: &y,
        }];
        let within = [Compared {
            a: 0,
            b: 2,
            a_ids: &x,
            b_ids: &x,
        }];
        let d = drift(&a, &b, &plan, &across, &within);
        assert_eq!((d.compared, d.differ), (1, 1));
        assert_eq!(d.position, Some([2, 2, 2]));
        assert_eq!(d.position_share, Some(0.5));
        assert_eq!((d.within_a_compared, d.within_a_differ), (1, 0));
        let e = d.example.unwrap();
        assert_eq!(
            (e.a.request_id.as_str(), e.b.request_id.as_str()),
            ("a0", "b1")
        );
        assert_eq!((e.position, e.a.tokens, e.b.tokens), (2, 4, 2));
    }
}
