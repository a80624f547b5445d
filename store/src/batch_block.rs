//! Encoding of an iteration's batch entries (which requests ran, in which phase, how many tokens).
//!
//! Version 2 names each request by its key in `request_keys` (a varint) rather than by its id
//! text: a batch may hold hundreds of requests every step and engine ids run to 40 bytes, so the
//! text would cost more than the tokens themselves. Version 1 rows (ids inline) still decode.
//!
//! An entry is `key, phase code, tokens, prefill offset`; a phase code with [`DRAFTED`] set is
//! followed by the speculative-decoding counts, `proposed, accepted` (no new version: a block
//! without drafts is byte for byte what it was).

use std::collections::HashMap;
use std::sync::Arc;

use tokenscope_core::model::{BatchEntry, Draft, DraftSums, Phase};

use super::bytes::{Reader, Writer};
use crate::error::{Error, Result};

const V1_IDS: u8 = 1;
const V2_KEYS: u8 = 2;
/// Set in an entry's phase code when draft counts follow it.
const DRAFTED: u8 = 0x10;

/// How a stored entry names its request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    Key(i64),
    Id(String),
}

/// A batch entry as stored, before its request key is looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub who: Who,
    pub phase: Phase,
    pub tokens: u32,
    pub prefill_offset: u32,
    pub draft: Option<Draft>,
}

/// Encodes a batch whose request ids all have keys in `keys` (the writer resolved them first).
pub fn encode<S: std::hash::BuildHasher>(
    batch: &[BatchEntry],
    keys: &HashMap<String, i64, S>,
) -> Result<Vec<u8>> {
    let mut w = Writer::default();
    w.u8(V2_KEYS);
    w.varint(batch.len() as u64);
    for e in batch {
        let key = keys
            .get(&*e.request_id)
            .ok_or_else(|| Error::Internal(format!("no request key for {:?}", e.request_id)))?;
        w.varint(*key as u64);
        let drafted = if e.draft.is_some() { DRAFTED } else { 0 };
        w.u8(phase_code(e.phase) | drafted);
        w.varint(e.tokens.into());
        w.varint(e.prefill_offset.into());
        if let Some(d) = e.draft {
            w.varint(d.proposed.into());
            w.varint(d.accepted.into());
        }
    }
    Ok(w.buf)
}

fn phase_code(p: Phase) -> u8 {
    match p {
        Phase::Prefill => 1,
        Phase::Decode => 2,
    }
}

pub fn decode(block: &[u8]) -> Result<Vec<Stored>> {
    let corrupt = || Error::Internal("stored iteration batch is corrupt".into());
    let mut r = Reader::new(block, "iteration batch");
    let version = r.u8()?;
    if version != V1_IDS && version != V2_KEYS {
        return Err(corrupt());
    }
    let n = r.varint()? as usize;
    let mut out = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        let who = if version == V2_KEYS {
            Who::Key(i64::try_from(r.varint()?).map_err(|_| corrupt())?)
        } else {
            Who::Id(r.str()?)
        };
        let code = r.u8()?;
        let phase = match code & !DRAFTED {
            1 => Phase::Prefill,
            2 => Phase::Decode,
            _ => return Err(corrupt()),
        };
        let (tokens, prefill_offset) = (r.u32()?, r.u32()?);
        let draft = if code & DRAFTED != 0 {
            Some(Draft {
                proposed: r.u32()?,
                accepted: r.u32()?,
            })
        } else {
            None
        };
        out.push(Stored {
            who,
            phase,
            tokens,
            prefill_offset,
            draft,
        });
    }
    Ok(out)
}

/// The speculative decoding of a stored batch, summed, without building its entries (the
/// waterfall's lane reads it for every step it draws).
pub fn draft_sums(block: &[u8]) -> Result<DraftSums> {
    let corrupt = || Error::Internal("stored iteration batch is corrupt".into());
    let mut r = Reader::new(block, "iteration batch");
    let version = r.u8()?;
    if version != V1_IDS && version != V2_KEYS {
        return Err(corrupt());
    }
    let mut sums = DraftSums::default();
    for _ in 0..r.varint()? {
        if version == V2_KEYS {
            r.varint()?;
        } else {
            r.str()?;
        }
        let code = r.u8()?;
        r.u32()?;
        r.u32()?;
        if code & DRAFTED != 0 {
            sums.add(Draft {
                proposed: r.u32()?,
                accepted: r.u32()?,
            });
        }
    }
    Ok(sums)
}

/// The keys an entry list needs looked up.
pub fn keys<'a>(entries: impl IntoIterator<Item = &'a Stored>) -> impl Iterator<Item = i64> {
    entries.into_iter().filter_map(|e| match e.who {
        Who::Key(k) => Some(k),
        Who::Id(_) => None,
    })
}

/// The entries with their request ids, from the keys' ids.
pub fn resolve(entries: Vec<Stored>, ids: &HashMap<i64, Arc<str>>) -> Result<Vec<BatchEntry>> {
    entries
        .into_iter()
        .map(|e| {
            let request_id = match e.who {
                Who::Id(id) => Arc::from(id),
                Who::Key(k) => ids
                    .get(&k)
                    .cloned()
                    .ok_or_else(|| Error::Internal(format!("request key {k} is missing")))?,
            };
            Ok(BatchEntry {
                request_id,
                phase: e.phase,
                tokens: e.tokens,
                prefill_offset: e.prefill_offset,
                draft: e.draft,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Vec<BatchEntry> {
        vec![
            BatchEntry {
                request_id: "cmpl-5f0c3b1e9a7d4c2b8e6f1a0d3c5b7e9f-0".into(),
                phase: Phase::Prefill,
                tokens: 2048,
                prefill_offset: 4096,
                draft: None,
            },
            BatchEntry {
                request_id: "b".into(),
                phase: Phase::Decode,
                tokens: 1,
                prefill_offset: 0,
                draft: None,
            },
            BatchEntry {
                request_id: "b".into(),
                phase: Phase::Decode,
                tokens: 5,
                prefill_offset: 0,
                draft: Some(Draft {
                    proposed: 4,
                    accepted: 3,
                }),
            },
        ]
    }

    #[test]
    fn round_trips_through_keys() {
        let batch = batch();
        let keys: HashMap<String, i64> = [(batch[0].request_id.to_string(), 7), ("b".into(), 300)]
            .into_iter()
            .collect();
        let block = encode(&batch, &keys).unwrap();
        // Version, count, then 6 + 5 + 7 bytes of entries: the 39-byte id became a one-byte key,
        // and the drafted entry carries its two counts.
        assert_eq!(block.len(), 20);
        let stored = decode(&block).unwrap();
        assert_eq!(super::keys(&stored).collect::<Vec<_>>(), [7, 300, 300]);
        let ids = keys_to_ids(&keys);
        assert_eq!(resolve(stored.clone(), &ids).unwrap(), batch);
        assert!(resolve(stored, &HashMap::new()).is_err(), "unknown key");
        assert!(decode(&block[..5]).is_err());
        assert!(draft_sums(&block[..5]).is_err());
        assert!(encode(&batch, &HashMap::new()).is_err(), "id without a key");
    }

    fn keys_to_ids(keys: &HashMap<String, i64>) -> HashMap<i64, Arc<str>> {
        keys.iter()
            .map(|(id, k)| (*k, Arc::from(id.as_str())))
            .collect()
    }

    #[test]
    fn version_1_rows_still_decode() {
        // As the first release wrote them: ids inline.
        let mut w = Writer::default();
        w.u8(V1_IDS);
        w.varint(1);
        w.str("a");
        w.u8(2);
        w.varint(1);
        w.varint(0);
        let stored = decode(&w.buf).unwrap();
        let entries = resolve(stored, &HashMap::new()).unwrap();
        assert_eq!(&*entries[0].request_id, "a");
        assert_eq!(entries[0].phase, Phase::Decode);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn every_batch_comes_back_through_its_keys(
                raw in proptest::collection::vec(
                    (
                        (0usize..50, any::<bool>(), any::<u32>(), any::<u32>()),
                        proptest::option::of((any::<u32>(), any::<u32>())),
                    ),
                    0..64,
                ),
                first_key in 0i64..(1 << 40),
            ) {
                let batch: Vec<BatchEntry> = raw
                    .into_iter()
                    .map(|((r, prefill, tokens, prefill_offset), draft)| BatchEntry {
                        request_id: format!("req-{r}").into(),
                        phase: if prefill { Phase::Prefill } else { Phase::Decode },
                        tokens,
                        prefill_offset,
                        draft: draft.map(|(proposed, accepted)| Draft { proposed, accepted }),
                    })
                    .collect();
                let keys: HashMap<String, i64> = (0..50)
                    .map(|r| (format!("req-{r}"), first_key + r * 977))
                    .collect();
                let block = encode(&batch, &keys).unwrap();
                let stored = decode(&block).unwrap();
                prop_assert_eq!(resolve(stored, &keys_to_ids(&keys)).unwrap(), batch.clone());
                // The scan that skips the entries sums what they hold.
                let mut sums = DraftSums::default();
                batch.iter().filter_map(|e| e.draft).for_each(|d| sums.add(d));
                prop_assert_eq!(draft_sums(&block).unwrap(), sums);
            }
        }
    }
}
