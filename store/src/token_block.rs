//! The compact per-request token block: columnar, delta- and varint-encoded, then zstd.
//!
//! Layout (version 1), each column a length-prefixed section so zstd sees like values together:
//! `n`, then columns: chosen position (k+1 when the chosen token is candidate k, else 0), explicit
//! token ids (only where chosen position is 0), emitted-time presence and deltas (from arrival),
//! iteration deltas (zigzag), logprob source + quantized logprobs, ranks, special codes, text
//! states + inline texts, candidate counts, candidate ids, candidate logprob deltas (within a
//! position), candidate text states + inline texts. Wide integer columns are byte planes (see
//! `Writer::planes`) in one zstd frame; the small control columns, varints, in another, so each
//! frame's entropy coder is fitted to one kind of data.
//!
//! Logprobs are stored to 1/2048 nat (error ≤ 0.00025 nat, i.e. ≤ 0.025 % of a probability): the
//! mantissa noise of an f32 is what makes token data incompressible, and no reader needs it.
//! Token texts equal to the model's vocabulary entry are stored as a reference (the vocab table);
//! only texts that differ are stored inline.

use tokenscope_core::model::{Candidate, Nanos, SpecialToken, Token};

use super::bytes::{Reader, Writer};
use crate::error::{Error, Result};

const VERSION: u8 = 1;
const ZSTD_LEVEL: i32 = 3;
const LOGPROB_SCALE: f32 = 2048.0;
/// How finely logprobs are kept: a stored one is within half of this of the one sent.
pub const LOGPROB_STEP_NATS: f32 = 1.0 / LOGPROB_SCALE;
/// Quantized value standing for -infinity (and anything below -4.5e15 nats).
const NEG_INF_Q: i64 = i64::MAX;

const TEXT_NONE: u8 = 0;
const TEXT_VOCAB: u8 = 1;
const TEXT_INLINE: u8 = 2;

const LOGPROB_NONE: u8 = 0;
const LOGPROB_OF_CANDIDATE: u8 = 1;
const LOGPROB_INLINE: u8 = 2;

pub fn quantize(logprob: f32) -> i64 {
    // `as` saturates: -inf → i64::MAX (= NEG_INF_Q), NaN → 0 (NaN never passes validation).
    (-logprob * LOGPROB_SCALE).round() as i64
}

pub fn dequantize(q: i64) -> f32 {
    if q == NEG_INF_Q {
        f32::NEG_INFINITY
    } else {
        -(q as f32) / LOGPROB_SCALE
    }
}

/// A token text the block refers to in the vocabulary instead of storing: fill it in after decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VocabRef {
    pub token: usize,
    /// `None`: the chosen token's text; `Some(k)`: candidate k's text.
    pub candidate: Option<usize>,
    pub token_id: u32,
}

/// The block's columns while it is built.
struct Columns {
    chosen_pos: Writer,
    token_id: Vec<u64>,
    emitted_present: Writer,
    emitted: Vec<u64>,
    scheduled_present: Writer,
    /// Emitted − scheduled (compute time), so values stay small.
    scheduled: Vec<u64>,
    batch_size: Writer,
    waiting: Writer,
    iteration: Writer,
    logprob_src: Writer,
    logprob: Vec<u64>,
    rank: Writer,
    special: Writer,
    text_state: Writer,
    text: Writer,
    cand_count: Writer,
    cand_id: Vec<u64>,
    cand_logprob: Vec<u64>,
    cand_text_state: Writer,
    cand_text: Writer,
}

impl Columns {
    /// Sized for `n` tokens and `k` candidates up front: grown from empty, the twenty columns
    /// reallocated and copied about ten times each per block (2–4 % of native ingest's encode in
    /// the profile, docs/BENCHMARKS.md 2026-12-02).
    fn with_capacity(n: usize, k: usize) -> Self {
        let w = Writer::with_capacity;
        Columns {
            chosen_pos: w(n),
            token_id: Vec::with_capacity(n),
            emitted_present: w(n),
            emitted: Vec::with_capacity(n),
            scheduled_present: w(n),
            scheduled: Vec::with_capacity(n),
            batch_size: w(n),
            waiting: w(n),
            iteration: w(2 * n),
            logprob_src: w(n),
            logprob: Vec::new(),
            rank: w(n),
            special: w(n),
            text_state: w(n),
            text: Writer::default(),
            cand_count: w(n),
            cand_id: Vec::with_capacity(k),
            cand_logprob: Vec::with_capacity(k),
            cand_text_state: w(k),
            cand_text: Writer::default(),
        }
    }
}

/// How one token's or candidate's text goes into the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredText<'t> {
    /// It has none.
    None,
    /// The model's vocabulary text of its id: the block refers to it.
    Vocab,
    /// The block stores it.
    Inline(&'t str),
}

/// The choice for texts sent with each token: a reference where `in_vocab(id, text)` says the
/// text is the model's stored text of the id, else the text itself.
pub fn own_texts<'t>(
    mut in_vocab: impl FnMut(u32, &'t str) -> bool,
) -> impl FnMut(Option<u32>, Option<&'t str>) -> StoredText<'t> {
    move |id, text| match (id, text) {
        (_, None) => StoredText::None,
        (Some(id), Some(text)) if in_vocab(id, text) => StoredText::Vocab,
        (_, Some(text)) => StoredText::Inline(text),
    }
}

fn put_text(state: &mut Writer, inline: &mut Writer, text: StoredText<'_>) {
    match text {
        StoredText::None => state.u8(TEXT_NONE),
        StoredText::Vocab => state.u8(TEXT_VOCAB),
        StoredText::Inline(t) => {
            state.u8(TEXT_INLINE);
            inline.str(t);
        }
    }
}

/// Encodes `tokens`; `base_ns` is the request's arrival (emitted times are stored as deltas);
/// `stored(id, text)` says how a token's or candidate's text is stored (see [`own_texts`]).
pub fn encode<'t>(
    tokens: &'t [Token],
    base_ns: Nanos,
    mut stored: impl FnMut(Option<u32>, Option<&'t str>) -> StoredText<'t>,
) -> Vec<u8> {
    let candidates = tokens.iter().map(|t| t.candidates.len()).sum();
    let mut c = Columns::with_capacity(tokens.len(), candidates);
    let mut cand_texts = Vec::new();
    let (mut last_emitted, mut last_iteration) = (base_ns, 0i64);
    for t in tokens {
        // Only a known id is elided; a text-only token keeps its own fields.
        let pos = t
            .candidates
            .iter()
            .position(|cand| t.token_id.is_some() && cand.token_id == t.token_id);
        match pos {
            Some(k) => c.chosen_pos.varint(k as u64 + 1),
            None => {
                c.chosen_pos.varint(0);
                c.token_id.push(id_code(t.token_id));
            }
        }
        c.emitted_present.u8(u8::from(t.emitted_ns.is_some()));
        if let Some(at) = t.emitted_ns {
            c.emitted.push(at.wrapping_sub(last_emitted) as u64);
            last_emitted = at;
        }
        c.scheduled_present.u8(u8::from(t.scheduled_ns.is_some()));
        if let Some(at) = t.scheduled_ns {
            c.scheduled.push(last_emitted.wrapping_sub(at) as u64);
        }
        // 0 = not reported, else value + 1.
        c.batch_size
            .varint(t.batch_size.map_or(0, |b| u64::from(b) + 1));
        c.waiting.varint(t.waiting.map_or(0, |w| u64::from(w) + 1));
        match t.iteration {
            None => c.iteration.varint(0),
            Some(id) => {
                c.iteration.varint(1);
                c.iteration.signed((id as i64).wrapping_sub(last_iteration));
                last_iteration = id as i64;
            }
        }
        match (t.logprob, pos) {
            (None, _) => c.logprob_src.u8(LOGPROB_NONE),
            (Some(lp), Some(k)) if quantize(lp) == quantize(t.candidates[k].logprob) => {
                c.logprob_src.u8(LOGPROB_OF_CANDIDATE)
            }
            (Some(lp), _) => {
                c.logprob_src.u8(LOGPROB_INLINE);
                c.logprob.push(quantize(lp) as u64);
            }
        }
        c.rank.varint(t.rank.map_or(0, |r| u64::from(r) + 1));
        c.special.u8(t.special.code());
        cand_texts.clear();
        cand_texts.extend(
            t.candidates
                .iter()
                .map(|cand| stored(cand.token_id, cand.text.as_deref())),
        );
        // The chosen token is usually among its candidates with the same text: one vocabulary
        // lookup (a cache miss, at ids spread over the vocabulary) serves both.
        let chosen_text = match pos {
            Some(k) if t.text == t.candidates[k].text => cand_texts[k],
            _ => stored(t.token_id, t.text.as_deref()),
        };
        put_text(&mut c.text_state, &mut c.text, chosen_text);
        c.cand_count.varint(t.candidates.len() as u64);
        let mut last_q = 0i64;
        for (cand, &text) in t.candidates.iter().zip(&cand_texts) {
            c.cand_id.push(id_code(cand.token_id));
            let q = quantize(cand.logprob);
            c.cand_logprob.push(q.wrapping_sub(last_q) as u64);
            last_q = q;
            put_text(&mut c.cand_text_state, &mut c.cand_text, text);
        }
    }
    let mut control = Writer::with_capacity(16 * tokens.len() + 2 * candidates);
    for column in [
        c.chosen_pos,
        c.emitted_present,
        c.scheduled_present,
        c.batch_size,
        c.waiting,
        c.iteration,
        c.logprob_src,
        c.rank,
        c.special,
        c.text_state,
        c.text,
        c.cand_count,
        c.cand_text_state,
        c.cand_text,
    ] {
        control.section(column);
    }
    let mut numeric = Writer::with_capacity(8 * tokens.len() + 4 * candidates);
    for column in [
        &c.token_id,
        &c.emitted,
        &c.scheduled,
        &c.logprob,
        &c.cand_id,
        &c.cand_logprob,
    ] {
        numeric.planes(column);
    }
    let (control, numeric) = (compress(&control.buf), compress(&numeric.buf));
    let mut out = Writer::default();
    out.u8(VERSION);
    out.varint(tokens.len() as u64);
    out.varint(control.len() as u64);
    out.buf.extend_from_slice(&control);
    out.buf.extend_from_slice(&numeric);
    out.buf
}

thread_local! {
    /// One compression context per thread, reused: creating one per frame was 3–4 % of OTLP
    /// ingest in the profile (docs/BENCHMARKS.md). The output is the same bytes.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

pub(super) fn compress(buf: &[u8]) -> Vec<u8> {
    let reused = COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
        }
        c.as_mut().and_then(|c| c.compress(buf).ok())
    });
    reused.unwrap_or_else(|| {
        zstd::bulk::compress(buf, ZSTD_LEVEL)
            .expect("zstd compression of an in-memory buffer cannot fail")
    })
}

/// Token ids shifted by one so that 0 stands for "unknown".
fn id_code(id: Option<u32>) -> u64 {
    id.map_or(0, |v| u64::from(v) + 1)
}

fn get_text(state: &mut Reader, inline: &mut Reader) -> Result<(Option<String>, bool)> {
    match state.u8()? {
        TEXT_NONE => Ok((None, false)),
        TEXT_VOCAB => Ok((None, true)),
        TEXT_INLINE => Ok((Some(inline.str()?), false)),
        _ => Err(corrupt()),
    }
}

/// A decoded plane column, consumed in order.
struct Column {
    values: std::vec::IntoIter<u64>,
}

impl Column {
    fn new(values: Vec<u64>) -> Self {
        Self {
            values: values.into_iter(),
        }
    }

    fn next(&mut self) -> Result<u64> {
        self.values.next().ok_or_else(corrupt)
    }

    /// A token id stored by [`id_code`].
    fn id(&mut self) -> Result<Option<u32>> {
        match self.next()? {
            0 => Ok(None),
            v => u32::try_from(v - 1).map(Some).map_err(|_| corrupt()),
        }
    }
}

thread_local! {
    /// One decompression context per thread, reused: a stream decoder per frame created (and
    /// the kernel zeroed) a fresh context each time, a fifth of the findings worker's time in
    /// the profile (docs/BENCHMARKS.md).
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// A block's frames decompressed, to at most [`MAX_FRAME`] bytes: a few corrupt bytes must not
/// make the reader allocate without bound.
pub(super) fn inflate(frame: &[u8]) -> Result<Vec<u8>> {
    // The writer's frames state their size: those take one call on the thread's context.
    // Anything else (no size, a lie, several frames) goes the streaming way, which bounds
    // what it reads and says what was wrong.
    if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(frame)
        && size <= MAX_FRAME
        && let Some(out) = DECOMPRESSOR.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            d.as_mut()
                .and_then(|d| d.decompress(frame, size as usize).ok())
        })
    {
        return Ok(out);
    }
    inflate_stream(frame)
}

fn inflate_stream(frame: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    zstd::stream::Decoder::new(frame)
        .map_err(|_| corrupt())?
        .take(MAX_FRAME + 1)
        .read_to_end(&mut out)
        .map_err(|_| corrupt())?;
    if out.len() as u64 > MAX_FRAME {
        return Err(corrupt());
    }
    Ok(out)
}

/// Largest frame a block may inflate to: about 10 million tokens with their candidates, far
/// beyond any request (the largest message is 64 MiB by default).
const MAX_FRAME: u64 = 256 << 20;

fn corrupt() -> Error {
    Error::Internal("stored token block is corrupt".into())
}

/// Decodes a block. Texts stored as vocabulary references come back as `None` and are listed in
/// the returned refs; [`fill_vocab`] puts them in.
/// Which tokens' top-k candidates a decode keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Candidates {
    All,
    /// The last token's only, the others read past: all the diagnosis reads (it judges the
    /// end-of-sequence token against the likeliest candidate, every other token by its own
    /// probability and rank), for the findings worker, which decodes a breached request on every
    /// pass that touches it (docs/BENCHMARKS.md, keeping up).
    Last,
}

pub fn decode(block: &[u8], base_ns: Nanos) -> Result<(Vec<Token>, Vec<VocabRef>)> {
    decode_keeping(block, base_ns, Candidates::All)
}

/// [`decode`], keeping the candidates `keep` says.
pub fn decode_keeping(
    block: &[u8],
    base_ns: Nanos,
    keep: Candidates,
) -> Result<(Vec<Token>, Vec<VocabRef>)> {
    let mut header = Reader::new(block, "token block");
    if header.u8()? != VERSION {
        return Err(Error::Internal("token block has an unknown version".into()));
    }
    let n = header.varint()? as usize;
    let control_len = header.varint()? as usize;
    let control = header.bytes(control_len)?;
    let numeric = header.rest();
    let (control, numeric) = (inflate(control)?, inflate(numeric)?);
    // Every token, and every candidate, takes at least a byte of the control frame: no column
    // can be longer than it (a column of equal values takes no bytes of its own).
    let most = control.len();
    if n > most {
        return Err(corrupt());
    }
    let mut r = Reader::new(&control, "token block");
    let mut chosen_pos = r.section()?;
    let mut emitted_present = r.section()?;
    let mut scheduled_present = r.section()?;
    let mut batch_size = r.section()?;
    let mut waiting = r.section()?;
    let mut iteration = r.section()?;
    let mut logprob_src = r.section()?;
    let mut rank = r.section()?;
    let mut special = r.section()?;
    let mut text_state = r.section()?;
    let mut text = r.section()?;
    let mut cand_count = r.section()?;
    let mut cand_text_state = r.section()?;
    let mut cand_text = r.section()?;
    let mut r = Reader::new(&numeric, "token block");
    let mut token_id = Column::new(r.planes(most)?);
    let mut emitted = Column::new(r.planes(most)?);
    let mut scheduled = Column::new(r.planes(most)?);
    let mut logprob = Column::new(r.planes(most)?);
    let mut cand_id = Column::new(r.planes(most)?);
    let mut cand_logprob = Column::new(r.planes(most)?);

    let mut tokens = Vec::with_capacity(n.min(1 << 20));
    let mut refs = Vec::new();
    // Where the candidates of a token not kept are read: one allocation for the block.
    let mut scratch: Vec<Candidate> = Vec::new();
    let (mut last_emitted, mut last_iteration) = (base_ns, 0i64);
    for i in 0..n {
        let pos = chosen_pos.varint()? as usize;
        let explicit_id = if pos == 0 { Some(token_id.id()?) } else { None };
        let emitted_ns = match emitted_present.u8()? {
            0 => None,
            _ => {
                last_emitted = last_emitted.wrapping_add(emitted.next()? as i64);
                Some(last_emitted)
            }
        };
        let scheduled_ns = match scheduled_present.u8()? {
            0 => None,
            _ => Some(last_emitted.wrapping_sub(scheduled.next()? as i64)),
        };
        let optional = |v: u32| v.checked_sub(1);
        let batch_size = optional(batch_size.u32()?);
        let waiting = optional(waiting.u32()?);
        let iteration_id = match iteration.varint()? {
            0 => None,
            _ => {
                last_iteration = last_iteration.wrapping_add(iteration.signed()?);
                Some(last_iteration as u64)
            }
        };
        let lp_src = logprob_src.u8()?;
        let lp_inline = match lp_src {
            LOGPROB_INLINE => Some(dequantize(logprob.next()? as i64)),
            LOGPROB_NONE | LOGPROB_OF_CANDIDATE => None,
            _ => return Err(corrupt()),
        };
        let rank = match rank.u32()? {
            0 => None,
            r => Some(r - 1),
        };
        let special = SpecialToken::from_code(special.u8()?).ok_or_else(corrupt)?;
        let (text, text_is_ref) = get_text(&mut text_state, &mut text)?;

        let k = cand_count.varint()? as usize;
        let kept = keep == Candidates::All || i + 1 == n;
        let mut candidates = if kept {
            Vec::with_capacity(k.min(1024))
        } else {
            scratch.clear();
            std::mem::take(&mut scratch)
        };
        let mut last_q = 0i64;
        for j in 0..k {
            let id = cand_id.id()?;
            last_q = last_q.wrapping_add(cand_logprob.next()? as i64);
            let (text, is_ref) = get_text(&mut cand_text_state, &mut cand_text)?;
            if let (true, true, Some(id)) = (kept, is_ref, id) {
                refs.push(VocabRef {
                    token: i,
                    candidate: Some(j),
                    token_id: id,
                });
            }
            candidates.push(Candidate {
                token_id: id,
                text,
                logprob: dequantize(last_q),
            });
        }
        let chosen = match (explicit_id, pos) {
            (Some(id), _) => id,
            (None, p) => candidates.get(p - 1).ok_or_else(corrupt)?.token_id,
        };
        let logprob = match lp_src {
            LOGPROB_OF_CANDIDATE => Some(
                candidates
                    .get(pos.wrapping_sub(1))
                    .ok_or_else(corrupt)?
                    .logprob,
            ),
            _ => lp_inline,
        };
        let candidates = if kept {
            candidates
        } else {
            scratch = candidates;
            Vec::new()
        };
        if let (true, Some(id)) = (text_is_ref, chosen) {
            refs.push(VocabRef {
                token: i,
                candidate: None,
                token_id: id,
            });
        }
        tokens.push(Token {
            token_id: chosen,
            emitted_ns,
            scheduled_ns,
            batch_size,
            waiting,
            iteration: iteration_id,
            logprob,
            rank,
            text,
            special,
            candidates,
        });
    }
    Ok((tokens, refs))
}

/// Puts vocabulary texts into decoded tokens. A missing entry leaves the text `None`.
pub fn fill_vocab<'v>(
    tokens: &mut [Token],
    refs: &[VocabRef],
    vocab: impl Fn(u32) -> Option<&'v str>,
) {
    for r in refs {
        let text = vocab(r.token_id).map(str::to_string);
        match r.candidate {
            None => tokens[r.token].text = text,
            Some(k) => tokens[r.token].candidates[k].text = text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn sample() -> Vec<Token> {
        let base = 1_700_000_000_000_000_000;
        vec![
            Token {
                token_id: Some(9906),
                emitted_ns: Some(base + 35_123_456),
                scheduled_ns: Some(base + 20_000_001),
                batch_size: Some(12),
                waiting: Some(0),
                iteration: Some(100),
                logprob: Some(-0.125),
                rank: Some(1),
                text: Some("Hello".into()),
                special: SpecialToken::None,
                candidates: vec![
                    Candidate {
                        token_id: Some(9906),
                        text: Some("Hello".into()),
                        logprob: -0.125,
                    },
                    Candidate {
                        token_id: Some(13347),
                        text: Some("Hi".into()),
                        logprob: -2.5,
                    },
                ],
            },
            Token {
                token_id: Some(128009),
                emitted_ns: Some(base + 60_000_001),
                scheduled_ns: None,
                batch_size: None,
                waiting: Some(3),
                iteration: Some(101),
                logprob: Some(-2.25),
                rank: Some(3),
                text: Some("<|eot_id|>".into()),
                special: SpecialToken::Eos,
                candidates: vec![
                    Candidate {
                        token_id: Some(0),
                        text: None,
                        logprob: -0.5,
                    },
                    Candidate {
                        token_id: Some(1),
                        text: Some(" odd".into()),
                        logprob: -1.0,
                    },
                ],
            },
            Token {
                token_id: Some(5),
                ..Token::default()
            },
            // Text-only source: no ids, chosen matched by text.
            Token {
                token_id: None,
                text: Some("Hi".into()),
                logprob: Some(-0.125),
                rank: Some(1),
                candidates: vec![Candidate {
                    token_id: None,
                    text: Some("Hi".into()),
                    logprob: -0.125,
                }],
                ..Token::default()
            },
        ]
    }

    #[test]
    fn round_trips_exactly_for_representable_logprobs() {
        let tokens = sample();
        let vocab: HashMap<u32, Arc<str>> =
            [(9906, "Hello".into()), (1, " different".into())].into();
        let block = encode(
            &tokens,
            1_700_000_000_000_000_000,
            own_texts(|id, text| vocab.get(&id).is_some_and(|s| **s == *text)),
        );
        let (mut back, refs) = decode(&block, 1_700_000_000_000_000_000).unwrap();
        assert_eq!(
            refs.len(),
            2,
            "chosen and candidate 'Hello' are stored as vocab references"
        );
        fill_vocab(&mut back, &refs, |id| vocab.get(&id).map(|s| &**s));
        assert_eq!(back, tokens);
    }

    #[test]
    fn quantization_error_is_bounded() {
        for lp in [-0.0001f32, -0.6, -3.3333, -17.77, -9999.0] {
            assert!((dequantize(quantize(lp)) - lp).abs() <= 0.5 / LOGPROB_SCALE + lp.abs() * 1e-6);
        }
        assert_eq!(dequantize(quantize(f32::NEG_INFINITY)), f32::NEG_INFINITY);
    }

    #[test]
    fn a_reused_compression_context_writes_the_same_bytes() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|v| (v % 251).to_le_bytes())
            .collect();
        let fresh = zstd::bulk::compress(&data, ZSTD_LEVEL).unwrap();
        assert_eq!(compress(&data), fresh);
        assert_eq!(compress(&data), fresh, "and again, from the same context");
    }

    #[test]
    fn frames_inflate_the_same_by_the_reused_context_and_by_the_stream() {
        let data: Vec<u8> = (0..20_000u32).flat_map(|v| (v % 7).to_le_bytes()).collect();
        let one = compress(&data);
        for _ in 0..3 {
            assert_eq!(inflate(&one).unwrap(), data, "sized frame, context reused");
        }
        assert_eq!(inflate_stream(&one).unwrap(), data);
        // Two frames back to back: the first states only its own size; the stream reads both.
        let two = [one.clone(), one.clone()].concat();
        assert_eq!(inflate(&two).unwrap(), [&data[..], &data[..]].concat());
        // A frame without a stated size (a stream encoder's) goes the streaming way.
        let unsized_frame = zstd::stream::encode_all(&data[..], ZSTD_LEVEL).unwrap();
        assert_eq!(inflate(&unsized_frame).unwrap(), data);
        assert!(inflate(&one[..one.len() / 2]).is_err(), "a cut frame");
    }

    #[test]
    fn corrupt_blocks_are_errors_not_panics() {
        let block = encode(&sample(), 0, own_texts(|_, _| false));
        for cut in 0..block.len() {
            assert!(decode(&block[..cut], 0).is_err(), "cut at {cut}");
        }
        let mut flipped = block.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0x5a;
            let _ = decode(&flipped, 0); // must not panic; may or may not detect the change
            flipped[i] ^= 0x5a;
        }
        assert!(decode(b"not a block", 0).is_err());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// A logprob the block keeps exactly (a multiple of 1/2048 nat).
        fn logprob() -> impl Strategy<Value = f32> {
            (0i64..400_000).prop_map(dequantize)
        }

        fn text() -> impl Strategy<Value = Option<String>> {
            proptest::option::of(".{0,6}")
        }

        fn candidate() -> impl Strategy<Value = Candidate> {
            (proptest::option::of(0u32..200_000), text(), logprob()).prop_map(
                |(token_id, text, logprob)| Candidate {
                    token_id,
                    text,
                    logprob,
                },
            )
        }

        fn special() -> impl Strategy<Value = SpecialToken> {
            prop_oneof![
                Just(SpecialToken::None),
                Just(SpecialToken::Eos),
                Just(SpecialToken::Bos),
                Just(SpecialToken::Pad),
                Just(SpecialToken::Other),
            ]
        }

        /// Tokens as requests carry them: times that move forward from the arrival (or are
        /// missing), everything else free.
        fn tokens() -> impl Strategy<Value = Vec<Token>> {
            let token = (
                (
                    proptest::option::of(0u32..200_000),
                    proptest::option::of(0i64..2_000_000_000),
                    proptest::option::of(0i64..1_000_000),
                    proptest::option::of(0u64..1_000),
                ),
                (
                    proptest::option::of(logprob()),
                    proptest::option::of(1u32..1_000),
                    text(),
                    special(),
                ),
                proptest::collection::vec(candidate(), 0..4),
                (
                    proptest::option::of(0u32..4096),
                    proptest::option::of(0u32..4096),
                ),
            );
            proptest::collection::vec(token, 0..40).prop_map(|raw| {
                let (mut at, mut iteration) = (BASE, 0u64);
                raw.into_iter()
                    .map(
                        |(
                            (token_id, gap, compute, step),
                            (lp, rank, text, sp),
                            candidates,
                            (b, w),
                        )| {
                            let emitted_ns = gap.map(|g| {
                                at += g;
                                at
                            });
                            let iteration = step.map(|s| {
                                iteration += s;
                                iteration
                            });
                            Token {
                                token_id,
                                emitted_ns,
                                scheduled_ns: emitted_ns.zip(compute).map(|(e, c)| e - c),
                                iteration,
                                logprob: lp,
                                rank,
                                text,
                                special: sp,
                                candidates,
                                batch_size: b,
                                waiting: w,
                            }
                        },
                    )
                    .collect()
            })
        }

        const BASE: Nanos = 1_796_022_000_000_000_000;

        proptest! {
            #[test]
            fn every_block_decodes_to_the_tokens_it_was_made_of(
                tokens in tokens(),
                vocab_ids in proptest::collection::hash_set(0u32..200_000, 0..20),
            ) {
                // Texts of ids in `vocab_ids` count as the vocabulary's; those become references.
                let vocab: HashMap<u32, String> = tokens
                    .iter()
                    .flat_map(|t| {
                        std::iter::once((t.token_id, t.text.clone()))
                            .chain(t.candidates.iter().map(|c| (c.token_id, c.text.clone())))
                    })
                    .filter_map(|(id, text)| Some((id?, text?)))
                    .filter(|(id, _)| vocab_ids.contains(id))
                    .collect();
                let block = encode(&tokens, BASE, own_texts(|id, text| vocab.get(&id).is_some_and(|v| v == text)));
                let (mut back, refs) = decode(&block, BASE).unwrap();
                fill_vocab(&mut back, &refs, |id| vocab.get(&id).map(String::as_str));
                prop_assert_eq!(&back, &tokens);
                // Keeping the last token's candidates only: the same tokens, chosen ids,
                // logprobs and texts included, without the others' candidates.
                let (mut lean, refs) = decode_keeping(&block, BASE, Candidates::Last).unwrap();
                fill_vocab(&mut lean, &refs, |id| vocab.get(&id).map(String::as_str));
                let last = back.len().saturating_sub(1);
                for t in &mut back[..last] {
                    t.candidates.clear();
                }
                prop_assert_eq!(lean, back);
            }
        }
    }
}
