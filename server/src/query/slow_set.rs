//! The slow set of a window: the store's tallies, ranked by `analysis::slow_set`.

use tokenscope_core::analysis::slow_set::{
    self, Attribute, BATCH_EDGES, PROMPT_EDGES, SlowSet, Tally,
};

use crate::error::{Error, Result};
use crate::store::{Buckets, RequestFilter, Slow, Store};

pub async fn slow_set(store: &Store, f: &RequestFilter, slow: Slow) -> Result<SlowSet> {
    let buckets = Buckets {
        prompt_tokens: &PROMPT_EDGES,
        batch_size: &BATCH_EDGES,
    };
    let (n_slow, all, rows) = store.slow_set_tallies(f, slow, buckets).await?;
    let tallies = rows
        .into_iter()
        .map(|r| {
            let attribute = Attribute::from_key(&r.attribute).ok_or_else(|| {
                Error::Internal(format!(
                    "the store tallied an unknown attribute {:?}",
                    r.attribute
                ))
            })?;
            Ok(Tally {
                attribute,
                value: r.value,
                slow: r.slow,
                all: r.all,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(slow_set::rank(definition(slow), n_slow, all, &tallies))
}

/// What made a request slow, as a sentence.
fn definition(slow: Slow) -> String {
    let ms = |ns: i64| format!("{} ms", (ns as f64 / 1e6 * 10.0).round() / 10.0);
    match slow {
        Slow::Slo(ttft, tpot) => format!("TTFT over {} or TPOT over {}", ms(ttft), ms(tpot)),
        Slow::Range(metric, min, i64::MAX) => {
            format!("{} of {} or more", metric.to_uppercase(), ms(min))
        }
        Slow::Range(metric, min, max) => {
            format!("{} from {} to {}", metric.to_uppercase(), ms(min), ms(max))
        }
    }
}
