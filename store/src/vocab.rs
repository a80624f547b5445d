//! The per-model vocabulary of token texts, so blocks store a text only when it differs.
//!
//! Every token of every batch compares its text and its candidates' texts with the entries
//! here, at ids spread over the whole vocabulary, so each lookup is a cache miss: the cache is
//! laid out to make it one. One model's entries are an array indexed by token id (a map for ids
//! above [`DENSE_IDS`]: ids are client input), and an entry holds a text of up to
//! [`INLINE`] bytes itself (nearly every token text), longer ones in one arena. Measured
//! against a map of separately allocated texts, then against an arena of every text: see
//! docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::sync::RwLock;

use sqlx::PgPool;

use crate::error::Result;

/// Ids below this are found by index (8 MB of index at most); the largest vocabularies in use
/// are about 256k.
const DENSE_IDS: u32 = 1 << 19;

/// Texts this long or shorter live in their entry: an entry is 16 bytes, four to a cache line.
const INLINE: usize = 12;

/// One token id's text: `len` bytes in `data`, or, when longer than [`INLINE`], at the arena
/// offset in `data[..4]`. A `len` of `u32::MAX` marks an id without a text.
#[derive(Clone, Copy)]
struct Entry {
    len: u32,
    data: [u8; INLINE],
}

const ABSENT: Entry = Entry {
    len: u32::MAX,
    data: [0; INLINE],
};

/// One model's cached vocabulary.
#[derive(Default)]
struct Texts {
    dense: Vec<Entry>,
    /// A bit per id below [`DENSE_IDS`] that has a text: texts sent by id only ask whether the
    /// id is known, for every token and candidate, and 16 KB of bits (a 128k vocabulary) stay
    /// in the core's cache where the entries (2 MB) do not.
    known: Vec<u64>,
    sparse: HashMap<u32, Entry>,
    /// Texts longer than [`INLINE`], each stored from a `&str`.
    arena: Vec<u8>,
}

impl Texts {
    fn bytes(&self, id: u32) -> Option<&[u8]> {
        let e = if id < DENSE_IDS {
            self.dense.get(id as usize)?
        } else {
            self.sparse.get(&id)?
        };
        let len = e.len as usize;
        if e.len == ABSENT.len {
            None
        } else if len <= INLINE {
            Some(&e.data[..len])
        } else {
            let start = u32::from_le_bytes([e.data[0], e.data[1], e.data[2], e.data[3]]) as usize;
            self.arena.get(start..start + len)
        }
    }

    fn get(&self, id: u32) -> Option<&str> {
        // Every entry was stored from a `&str`, so this never fails; checked rather than assumed.
        self.bytes(id).and_then(|b| std::str::from_utf8(b).ok())
    }

    fn contains(&self, id: u32) -> bool {
        if id < DENSE_IDS {
            let k = id as usize;
            self.known
                .get(k / 64)
                .is_some_and(|w| w & (1 << (k % 64)) != 0)
        } else {
            self.sparse.contains_key(&id)
        }
    }

    /// Entries never change once stored (first writer wins), so a known id is left alone. A
    /// long text that would take the arena past 4 GB stays uncached (and is stored inline).
    fn insert(&mut self, id: u32, text: &str) {
        if self.contains(id) {
            return;
        }
        let Ok(len) = u32::try_from(text.len()) else {
            return;
        };
        let mut entry = Entry {
            len,
            data: [0; INLINE],
        };
        if text.len() <= INLINE {
            entry.data[..text.len()].copy_from_slice(text.as_bytes());
        } else {
            // A length of u32::MAX marks an absent id; offsets past u32::MAX cannot be addressed.
            let Ok(start) = u32::try_from(self.arena.len()) else {
                return;
            };
            if len == ABSENT.len || start.checked_add(len).is_none() {
                return;
            }
            self.arena.extend_from_slice(text.as_bytes());
            entry.data[..4].copy_from_slice(&start.to_le_bytes());
        }
        if id < DENSE_IDS {
            let k = id as usize;
            if self.dense.len() <= k {
                self.dense.resize(k + 1, ABSENT);
                self.known.resize(k / 64 + 1, 0);
            }
            self.dense[k] = entry;
            self.known[k / 64] |= 1 << (k % 64);
        } else {
            self.sparse.insert(id, entry);
        }
    }
}

/// An export's token texts by id (`ResourceTraces.token_texts`, interned by its sender): the
/// texts of the tokens and candidates that came with an id and without a text of their own.
/// Ids are distinct (checked at ingest).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TextsById(pub Vec<(u32, String)>);

/// Vocabulary rows are insert-only and first-writer-wins, so a cached entry never goes stale.
#[derive(Default)]
pub struct VocabCache {
    by_model: RwLock<HashMap<i32, Texts>>,
}

/// One model's cached vocabulary, read while a batch is encoded or decoded.
pub struct Vocab<'a>(Option<&'a Texts>);

impl Vocab<'_> {
    /// The stored text of a token id, if the vocabulary has it.
    pub fn text(&self, id: u32) -> Option<&str> {
        self.0.and_then(|t| t.get(id))
    }

    /// Whether the vocabulary has a text for `id`.
    pub fn knows(&self, id: u32) -> bool {
        self.0.is_some_and(|t| t.contains(id))
    }

    /// Whether `text` is the stored text of `id`: `None` when the vocabulary has no text for it
    /// yet. Compares bytes in place: this runs for every token and candidate written.
    pub fn matches(&self, id: u32, text: &str) -> Option<bool> {
        self.0
            .and_then(|t| t.bytes(id))
            .map(|b| b == text.as_bytes())
    }
}

impl VocabCache {
    /// Stores texts for token ids the cache did not know (found by [`Vocab::matches`] while a
    /// batch was encoded) and caches what the table then holds: the first text sent for an id
    /// wins, another writer's included. Texts with NUL bytes cannot be Postgres `text`; they stay
    /// out (and are stored inline). Returns whether the cache learned any text.
    ///
    /// Writers of one model's vocabulary take its advisory lock, so the ids found stored under it
    /// are exactly those another writer has, and the rest go in with a plain `INSERT`. A new
    /// model's first batches bring thousands of ids each; `ON CONFLICT DO NOTHING` and a read
    /// back afterwards cost Postgres about three times as much per id (docs/BENCHMARKS.md,
    /// 2026-12-02 morning).
    pub async fn store<'a>(
        &self,
        pool: &PgPool,
        model_id: i32,
        unknown: impl IntoIterator<Item = (u32, &'a str)>,
    ) -> Result<bool> {
        let mut missing: HashMap<u32, &str> = HashMap::new();
        for (id, text) in unknown {
            if !text.contains('\0') {
                missing.entry(id).or_insert(text);
            }
        }
        if missing.is_empty() {
            return Ok(false);
        }
        // Ids are stored as int4; vocabularies are far below 2^31, and the cast round-trips anyway.
        let ids: Vec<i32> = missing.keys().map(|&id| id as i32).collect();
        let mut tx = pool.begin().await?;
        sqlx::query!(
            "SELECT pg_advisory_xact_lock($1, $2)",
            super::VOCAB_LOCKS,
            model_id
        )
        .execute(&mut *tx)
        .await?;
        let stored = stored_texts(&mut *tx, model_id, &ids).await?;
        for (id, _) in &stored {
            missing.remove(id);
        }
        let (new_ids, new_texts): (Vec<i32>, Vec<&str>) =
            missing.iter().map(|(&id, &t)| (id as i32, t)).unzip();
        if !new_ids.is_empty() {
            sqlx::query!(
                "INSERT INTO vocab (model_id, token_id, text) SELECT $1::int, * FROM UNNEST($2::int[], $3::text[])",
                model_id,
                &new_ids,
                &new_texts as &[&str]
            )
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        let stored = stored.iter().map(|(id, text)| (*id, text.as_str()));
        self.remember(model_id, stored.chain(missing));
        Ok(true)
    }

    /// Makes sure the cache holds the stored texts of `ids` (for decoding); ids the database
    /// does not know stay unknown.
    pub async fn load(
        &self,
        pool: &PgPool,
        model_id: i32,
        ids: impl IntoIterator<Item = u32>,
    ) -> Result<()> {
        let mut missing: Vec<i32> = {
            let cache = self.by_model.read().expect("vocab cache poisoned");
            let known = cache.get(&model_id);
            ids.into_iter()
                .filter(|&id| !known.is_some_and(|k| k.contains(id)))
                .map(|id| id as i32)
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_unstable();
        missing.dedup();
        self.fetch(pool, model_id, missing).await
    }

    /// Runs `f` with the model's cached vocabulary. It holds a read lock: `f` must not block.
    pub fn with<R>(&self, model_id: i32, f: impl FnOnce(Vocab<'_>) -> R) -> R {
        let cache = self.by_model.read().expect("vocab cache poisoned");
        f(Vocab(cache.get(&model_id)))
    }

    /// Reads the stored texts of `ids` into the cache.
    async fn fetch(&self, pool: &PgPool, model_id: i32, ids: Vec<i32>) -> Result<()> {
        let stored = stored_texts(pool, model_id, &ids).await?;
        self.remember(
            model_id,
            stored.iter().map(|(id, text)| (*id, text.as_str())),
        );
        Ok(())
    }

    /// Caches texts as the `vocab` table holds them (public for the benches, which measure
    /// encoding against a warm vocabulary without a database).
    pub fn remember<'a>(&self, model_id: i32, texts: impl IntoIterator<Item = (u32, &'a str)>) {
        let mut cache = self.by_model.write().expect("vocab cache poisoned");
        let known = cache.entry(model_id).or_default();
        for (id, text) in texts {
            known.insert(id, text);
        }
    }
}

/// The texts the `vocab` table holds for those of `ids` it has.
async fn stored_texts(
    conn: impl sqlx::PgExecutor<'_>,
    model_id: i32,
    ids: &[i32],
) -> Result<Vec<(u32, String)>> {
    let rows = sqlx::query!(
        "SELECT token_id, text FROM vocab WHERE model_id = $1 AND token_id = ANY($2)",
        model_id,
        ids
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.token_id as u32, row.text))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_ids_find_their_texts_and_the_first_text_wins() {
        let mut t = Texts::default();
        t.insert(5, "hello");
        t.insert(DENSE_IDS + 7, " world");
        t.insert(5, "changed");
        t.insert(2, "");
        assert_eq!(t.get(5), Some("hello"));
        assert_eq!(t.get(DENSE_IDS + 7), Some(" world"));
        assert_eq!(t.get(2), Some(""), "an empty text is a text");
        assert_eq!(t.get(3), None, "an id between known ones");
        assert_eq!(t.get(1_000), None, "an id past the index");
        assert_eq!(t.get(u32::MAX), None);
        for (id, known) in [(5, true), (2, true), (DENSE_IDS + 7, true), (3, false)] {
            assert_eq!(t.contains(id), known, "{id}");
        }
        assert!(!t.contains(1_000) && !t.contains(DENSE_IDS + 8));
    }

    #[test]
    fn texts_in_their_entry_and_in_the_arena_compare_by_bytes() {
        let mut t = Texts::default();
        let twelve = "abcdefghijkl";
        let thirteen = "abcdefghijklm";
        let long = " antidisestablishmentarianism ü";
        t.insert(1, twelve);
        t.insert(2, thirteen);
        t.insert(3, long);
        t.insert(DENSE_IDS + 1, long);
        assert_eq!(t.get(1), Some(twelve), "the longest text kept in its entry");
        assert_eq!(t.get(2), Some(thirteen), "the shortest text in the arena");
        assert_eq!(t.get(3), Some(long));
        assert_eq!(t.get(DENSE_IDS + 1), Some(long));
        let v = Vocab(Some(&t));
        assert_eq!(v.matches(2, thirteen), Some(true));
        assert_eq!(
            v.matches(2, twelve),
            Some(false),
            "a prefix is another text"
        );
        assert_eq!(v.matches(1, thirteen), Some(false));
        assert_eq!(v.matches(4, "x"), None, "unknown id");
        assert_eq!(Vocab(None).matches(1, twelve), None, "unknown model");
    }
}
