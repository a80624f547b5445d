//! Native ingest without the database, per core: exports of 32 requests × 512 tokens with top-5
//! candidates (texts by id, and ids) and their iterations, then the same in the `SERVING` shape
//! (64 × 256 tokens, Zipf-distributed ids), then the first shape with a text sent with every
//! token. Times protobuf decode (from one slice, as the server's codec reads it, and through a
//! buffer view like tonic's default codec hands over), the mapping to the model (validation
//! included), the token-block encoding against a warm vocabulary, and dropping the decoded
//! batch, on one thread. Prints figures; asserts only that the vocabulary was warm. `cargo bench -p tokenscope --bench
//! native` (also run by `scripts/bench ingest`).

/// The allocator the `tokenscope` binary runs with (`server/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/native_exports.rs"]
mod native_exports;

use std::time::Instant;

use prost::Message;
use prost::bytes::{Buf, BytesMut};

use native_exports::{BENCH, SERVING, Shape, TEXTS_PER_TOKEN, TOP_K, exports};
use tokenscope::ingest::native;
use tokenscope::store::{ById, Lacking, encode_tokens, vocab::VocabCache};
use tokenscope_proto::v1;

const EXPORTS: usize = 48;
/// Instances the exports cycle through, each with its own exporter (as in the end-to-end run).
const INSTANCES: usize = 4;
const MODEL: i32 = 1;

/// A length-limited view of a receive buffer whose `advance` is checked at each layer, the way
/// tonic's `DecodeBuf` is (the default codec decodes through it).
struct View<'a> {
    buf: &'a mut BytesMut,
    len: usize,
}

impl Buf for View<'_> {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        let c = self.buf.chunk();
        &c[..c.len().min(self.len)]
    }

    fn advance(&mut self, cnt: usize) {
        assert!(cnt <= self.len);
        self.buf.advance(cnt);
        self.len -= cnt;
    }
}

fn main() {
    measure(&BENCH);
    measure(&SERVING);
    measure(&TEXTS_PER_TOKEN);
}

fn measure(shape: &Shape) {
    // Exports from a run's steady state: each exporter has sent most ids' texts already.
    let steady = EXPORTS..2 * EXPORTS;
    let wire: Vec<Vec<u8>> = exports(steady.clone(), shape, INSTANCES)
        .iter()
        .map(Message::encode_to_vec)
        .collect();
    let tokens = EXPORTS * shape.requests * shape.tokens;
    // A warm vocabulary: every text the exports refer to, as a server that has run a while has it.
    let vocab = VocabCache::default();
    let with_texts = Shape {
        texts_by_id: false,
        ..*shape
    };
    for e in exports(steady, &with_texts, INSTANCES) {
        for r in e.resource_traces.iter().flat_map(|rt| &rt.requests) {
            let c = r.tokens.as_ref().expect("tokens");
            let ids = c.token_id.iter().chain(&c.candidate_token_id);
            let texts = c.text.iter().chain(&c.candidate_text);
            vocab.remember(MODEL, ids.zip(texts).map(|(&id, t)| (id, t.as_str())));
        }
    }
    // Warm up, then three timed passes; the best is reported (the machine is shared).
    let mut best = [f64::INFINITY; 5];
    for pass in 0..4 {
        let mut times = [0.0; 5];
        for w in &wire {
            let mut received = BytesMut::from(w.as_slice());
            let t = Instant::now();
            let len = received.len();
            let viewed = v1::ExportRequest::decode(View {
                buf: &mut received,
                len,
            })
            .expect("valid protobuf");
            let t0 = Instant::now();
            drop(viewed);
            let t1 = Instant::now();
            let export = v1::ExportRequest::decode(w.as_slice()).expect("valid protobuf");
            let t2 = Instant::now();
            let decoded = native::decode(export);
            let t3 = Instant::now();
            for b in &decoded.batches {
                vocab.with(MODEL, |v| {
                    // As `Store::write` finds them: the ids whose texts differ from the vocabulary's.
                    let by_id = b.texts_by_id.as_ref().map(|t| ById {
                        own: (t.0.iter())
                            .filter(|(id, text)| v.matches(*id, text) != Some(true))
                            .map(|(id, text)| (*id, text.as_str()))
                            .collect(),
                    });
                    let mut lacking = Lacking::default();
                    for r in &b.requests {
                        let block = encode_tokens(&r.value, &v, by_id.as_ref(), &mut lacking);
                        std::hint::black_box(block);
                    }
                    assert!(lacking.unknown.is_empty() && lacking.unresolved.is_empty());
                });
            }
            let t4 = Instant::now();
            drop(decoded);
            let t5 = Instant::now();
            let phases = [t0 - t, t2 - t1, t3 - t2, t4 - t3, t5 - t4];
            for (sum, d) in times.iter_mut().zip(phases) {
                *sum += d.as_secs_f64();
            }
        }
        if pass > 0 {
            for (b, v) in best.iter_mut().zip(times) {
                *b = b.min(v);
            }
        }
    }
    let [viewed, decode, map, encode, dropped] = best;
    let total = decode + map + encode + dropped;
    let rate = |s: f64| tokens as f64 / s / 1e3;
    let texts = if shape.texts_by_id {
        "texts by id"
    } else {
        "a text with every token"
    };
    println!(
        "native (no database), {} shape: {EXPORTS} exports × {} requests × {} tokens, top-{TOP_K}, {texts}, {:.1} bytes a token on the wire, one thread",
        shape.name,
        shape.requests,
        shape.tokens,
        wire.iter().map(Vec::len).sum::<usize>() as f64 / tokens as f64
    );
    println!(
        "  protobuf decode {:>5.0} ms (through a buffer view as tonic's default codec: {:.0} ms)   map {:>5.0} ms   token-block encode, warm vocabulary {:>5.0} ms   drop {:>4.0} ms",
        decode * 1e3,
        viewed * 1e3,
        map * 1e3,
        encode * 1e3,
        dropped * 1e3
    );
    println!(
        "  decode + map + encode + drop: {:.0}k tokens/s per core (decode {:.0}k, map {:.0}k, encode {:.0}k)",
        rate(total),
        rate(decode),
        rate(map),
        rate(encode)
    );
}
