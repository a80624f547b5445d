//! The per-model vocabulary of token texts, so blocks store a text only when it differs.
//!
//! Every token of every batch looks its text up here (twice per candidate when encoding), so
//! the cache is laid out for that: one model's texts in one arena, found by token id through an
//! array for ids below [`DENSE_IDS`] (every real vocabulary) and a map above (ids are client
//! input). Measured against a map of separately allocated texts: see docs/BENCHMARKS.md.

use std::collections::HashMap;
use std::sync::RwLock;

use sqlx::PgPool;

use crate::error::Result;

/// Ids below this are found by index (4 MB of index at most); the largest vocabularies in use
/// are about 256k.
const DENSE_IDS: u32 = 1 << 19;

/// Where a text lies in the arena.
#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
}

const ABSENT: Span = Span {
    start: 0,
    len: u32::MAX,
};

/// One model's cached vocabulary.
#[derive(Default)]
struct Texts {
    arena: String,
    dense: Vec<Span>,
    sparse: HashMap<u32, Span>,
}

impl Texts {
    fn get(&self, id: u32) -> Option<&str> {
        let span = if id < DENSE_IDS {
            *self.dense.get(id as usize)?
        } else {
            *self.sparse.get(&id)?
        };
        (span.len != ABSENT.len)
            .then(|| &self.arena[span.start as usize..(span.start + span.len) as usize])
    }

    fn contains(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    /// Entries never change once stored (first writer wins), so a known id is left alone. A
    /// text that would overflow the arena's 4 GB stays uncached (and is stored inline).
    fn insert(&mut self, id: u32, text: &str) {
        if self.contains(id) {
            return;
        }
        let (Ok(start), Ok(len)) = (u32::try_from(self.arena.len()), u32::try_from(text.len()))
        else {
            return;
        };
        // A length of u32::MAX marks an absent id; offsets past u32::MAX cannot be addressed.
        if len == ABSENT.len || start.checked_add(len).is_none() {
            return;
        }
        self.arena.push_str(text);
        let span = Span { start, len };
        if id < DENSE_IDS {
            let k = id as usize;
            if self.dense.len() <= k {
                self.dense.resize(k + 1, ABSENT);
            }
            self.dense[k] = span;
        } else {
            self.sparse.insert(id, span);
        }
    }
}

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
}

impl VocabCache {
    /// Makes sure the cache holds the stored text of every wanted token id, storing the texts not
    /// known yet (the first text sent for an id wins). Texts with NUL bytes cannot be Postgres
    /// `text`; they stay out (and are stored inline).
    pub async fn ensure<'a>(
        &self,
        pool: &PgPool,
        model_id: i32,
        wanted: impl Iterator<Item = (u32, &'a str)>,
    ) -> Result<()> {
        let mut missing: HashMap<u32, &str> = HashMap::new();
        {
            let cache = self.by_model.read().expect("vocab cache poisoned");
            let known = cache.get(&model_id);
            for (id, text) in wanted {
                if !known.is_some_and(|k| k.contains(id)) && !text.contains('\0') {
                    missing.entry(id).or_insert(text);
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        // Ids are stored as int4; vocabularies are far below 2^31, and the cast round-trips anyway.
        // Sorted, so concurrent writers lock the unique-index entries in the same order and
        // cannot deadlock on overlapping ids.
        let mut rows: Vec<(i32, &str)> = missing.iter().map(|(&id, &t)| (id as i32, t)).collect();
        rows.sort_unstable();
        let (ids, texts): (Vec<i32>, Vec<&str>) = rows.into_iter().unzip();
        sqlx::query!(
            "INSERT INTO vocab (model_id, token_id, text) SELECT $1::int, * FROM UNNEST($2::int[], $3::text[])
             ON CONFLICT DO NOTHING",
            model_id,
            &ids,
            &texts as &[&str]
        )
        .execute(pool)
        .await?;
        // Read back: another writer may have stored a different text for an id first.
        self.fetch(pool, model_id, ids).await
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
        let rows = sqlx::query!(
            "SELECT token_id, text FROM vocab WHERE model_id = $1 AND token_id = ANY($2)",
            model_id,
            &ids
        )
        .fetch_all(pool)
        .await?;
        let mut cache = self.by_model.write().expect("vocab cache poisoned");
        let known = cache.entry(model_id).or_default();
        for row in rows {
            known.insert(row.token_id as u32, &row.text);
        }
        Ok(())
    }
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
    }
}
