//! Encoding of an iteration's batch entries (which requests ran, in which phase, how many tokens).

use app::model::{BatchEntry, Phase};

use super::bytes::{Reader, Writer};
use crate::error::{Error, Result};

const VERSION: u8 = 1;

pub fn encode(batch: &[BatchEntry]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(VERSION);
    w.varint(batch.len() as u64);
    for e in batch {
        w.str(&e.request_id);
        w.u8(match e.phase {
            Phase::Prefill => 1,
            Phase::Decode => 2,
        });
        w.varint(e.tokens.into());
        w.varint(e.prefill_offset.into());
    }
    w.buf
}

pub fn decode(block: &[u8]) -> Result<Vec<BatchEntry>> {
    let corrupt = || Error::Internal("stored iteration batch is corrupt".into());
    let mut r = Reader::new(block, "iteration batch");
    if r.u8()? != VERSION {
        return Err(corrupt());
    }
    let n = r.varint()? as usize;
    let mut out = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        out.push(BatchEntry {
            request_id: r.str()?,
            phase: match r.u8()? {
                1 => Phase::Prefill,
                2 => Phase::Decode,
                _ => return Err(corrupt()),
            },
            tokens: r.u32()?,
            prefill_offset: r.u32()?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let batch = vec![
            BatchEntry {
                request_id: "a".into(),
                phase: Phase::Prefill,
                tokens: 2048,
                prefill_offset: 4096,
            },
            BatchEntry {
                request_id: "b".into(),
                phase: Phase::Decode,
                tokens: 1,
                prefill_offset: 0,
            },
        ];
        assert_eq!(decode(&encode(&batch)).unwrap(), batch);
        assert!(decode(&encode(&batch)[..5]).is_err());
    }
}
