//! The same prompts' answers on both sides of a comparison: the store's prompt keys paired by
//! `analysis::answers`, the paired answers read as token ids, and the example pair's words around
//! where they part.

use std::collections::HashMap;

use tokenscope_core::analysis::answers::{
    self, AnswerDrift, Asked, CONTEXT_AFTER, CONTEXT_BEFORE, Compared,
};
use tokenscope_core::model::{Nanos, Token};

use crate::error::Result;
use crate::store::{RequestFilter, Store};

/// Requests read per side to find prompts asked on both (the oldest of the window).
const MAX_ASKED: i64 = 20_000;

/// `None` when neither side has a request with a prompt fingerprint.
pub async fn answer_drift(
    store: &Store,
    a: &RequestFilter,
    b: &RequestFilter,
) -> Result<Option<AnswerDrift>> {
    let (a_rows, b_rows) = tokio::try_join!(
        store.prompt_keys(a, MAX_ASKED),
        store.prompt_keys(b, MAX_ASKED),
    )?;
    if a_rows.is_empty() && b_rows.is_empty() {
        return Ok(None);
    }
    let asked = |rows: Vec<crate::store::PromptKeyRow>| -> (Vec<Asked>, Vec<i32>) {
        rows.into_iter()
            .map(|r| {
                (
                    Asked {
                        key: r.key,
                        instance: r.instance,
                        request_id: r.request_id,
                        arrival_ns: r.arrival_ns,
                    },
                    r.instance_id,
                )
            })
            .unzip()
    };
    let ((a_asked, a_ids), (b_asked, b_ids)) = (asked(a_rows), asked(b_rows));
    let plan = answers::plan(&a_asked, &b_asked);
    // Every answer the plan compares, read at once.
    let key = |list: &[Asked], ids: &[i32], k: usize| {
        (ids[k], list[k].request_id.clone(), list[k].arrival_ns)
    };
    let mut wanted: Vec<(i32, String, Nanos)> = Vec::new();
    for &(i, j) in &plan.across {
        wanted.push(key(&a_asked, &a_ids, i));
        wanted.push(key(&b_asked, &b_ids, j));
    }
    for &(i, k) in &plan.within_a {
        wanted.push(key(&a_asked, &a_ids, i));
        wanted.push(key(&a_asked, &a_ids, k));
    }
    let read: HashMap<(i32, String, Nanos), Vec<Option<u32>>> = store
        .answer_tokens(&wanted)
        .await?
        .into_iter()
        .map(|r| ((r.instance_id, r.request_id, r.arrival_ns), r.token_ids))
        .collect();
    let none = Vec::new();
    let ids_of =
        |list: &[Asked], ids: &[i32], k: usize| read.get(&key(list, ids, k)).unwrap_or(&none);
    let across: Vec<Compared> = plan
        .across
        .iter()
        .map(|&(i, j)| Compared {
            a: i,
            b: j,
            a_ids: ids_of(&a_asked, &a_ids, i),
            b_ids: ids_of(&b_asked, &b_ids, j),
        })
        .collect();
    let within: Vec<Compared> = plan
        .within_a
        .iter()
        .map(|&(i, k)| Compared {
            a: i,
            b: k,
            a_ids: ids_of(&a_asked, &a_ids, i),
            b_ids: ids_of(&a_asked, &a_ids, k),
        })
        .collect();
    let mut drift = answers::drift(&a_asked, &b_asked, &plan, &across, &within);
    if let Some(e) = &mut drift.example {
        let from = e.context_from as usize;
        let to = e.position as usize + CONTEXT_AFTER;
        debug_assert!(e.position as usize - from <= CONTEXT_BEFORE);
        e.a_context = words(store, &e.a.request_id, &e.a.instance, from..to).await?;
        e.b_context = words(store, &e.b.request_id, &e.b.instance, from..to).await?;
    }
    Ok(Some(drift))
}

/// The texts of a request's tokens in `range` (an end-of-sequence token as its text).
async fn words(
    store: &Store,
    request_id: &str,
    instance: &str,
    range: std::ops::Range<usize>,
) -> Result<Vec<String>> {
    let loaded = store
        .load_request_rows(request_id, &[instance.to_string()])
        .await?;
    let tokens: &[Token] = loaded.first().map_or(&[], |l| &l.trace.tokens[..]);
    Ok(tokens
        .iter()
        .skip(range.start)
        .take(range.len())
        .map(|t| t.text.clone().unwrap_or_default())
        .collect())
}
