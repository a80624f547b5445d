//! The per-model vocabulary of token texts, so blocks store a text only when it differs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::PgPool;

use crate::error::Result;

/// Vocabulary rows are insert-only and first-writer-wins, so a cached entry never goes stale.
#[derive(Default)]
pub struct VocabCache {
    by_model: Mutex<HashMap<i32, HashMap<u32, Arc<str>>>>,
}

impl VocabCache {
    /// Returns the stored text of every wanted token id, storing texts not yet known.
    /// Texts with NUL bytes cannot be Postgres `text`; they stay out (and are stored inline).
    pub async fn resolve<'a>(
        &self,
        pool: &PgPool,
        model_id: i32,
        wanted: impl Iterator<Item = (u32, &'a str)>,
    ) -> Result<HashMap<u32, Arc<str>>> {
        let mut found = HashMap::new();
        let mut missing: HashMap<u32, &str> = HashMap::new();
        {
            let cache = self.by_model.lock().expect("vocab cache poisoned");
            let known = cache.get(&model_id);
            for (id, text) in wanted {
                if found.contains_key(&id) || missing.contains_key(&id) {
                    continue;
                }
                match known.and_then(|k| k.get(&id)) {
                    Some(t) => {
                        found.insert(id, t.clone());
                    }
                    None if !text.contains('\0') => {
                        missing.insert(id, text);
                    }
                    None => {}
                }
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        // Ids are stored as int4; vocabularies are far below 2^31, and the cast round-trips anyway.
        // Sorted, so concurrent writers lock the unique-index entries in the same order and
        // cannot deadlock on overlapping ids.
        let mut rows: Vec<(i32, String)> = missing
            .iter()
            .map(|(&id, &t)| (id as i32, t.to_string()))
            .collect();
        rows.sort_unstable();
        let (ids, texts): (Vec<i32>, Vec<String>) = rows.into_iter().unzip();
        sqlx::query!(
            "INSERT INTO vocab (model_id, token_id, text) SELECT $1::int, * FROM UNNEST($2::int[], $3::text[])
             ON CONFLICT DO NOTHING",
            model_id,
            &ids,
            &texts
        )
        .execute(pool)
        .await?;
        let ids: Vec<u32> = missing.into_keys().collect();
        found.extend(self.lookup(pool, model_id, &ids).await?);
        Ok(found)
    }

    /// Texts of the given ids (for decoding), from the cache or the database.
    pub async fn lookup(
        &self,
        pool: &PgPool,
        model_id: i32,
        ids: &[u32],
    ) -> Result<HashMap<u32, Arc<str>>> {
        let mut found = HashMap::new();
        let mut missing = Vec::new();
        {
            let cache = self.by_model.lock().expect("vocab cache poisoned");
            let known = cache.get(&model_id);
            for &id in ids {
                match known.and_then(|k| k.get(&id)) {
                    Some(t) => {
                        found.insert(id, t.clone());
                    }
                    None => missing.push(id as i32),
                }
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        missing.sort_unstable();
        missing.dedup();
        let rows = sqlx::query!(
            "SELECT token_id, text FROM vocab WHERE model_id = $1 AND token_id = ANY($2)",
            model_id,
            &missing
        )
        .fetch_all(pool)
        .await?;
        let mut cache = self.by_model.lock().expect("vocab cache poisoned");
        let known = cache.entry(model_id).or_default();
        for row in rows {
            let text: Arc<str> = row.text.into();
            known.insert(row.token_id as u32, text.clone());
            found.insert(row.token_id as u32, text);
        }
        Ok(found)
    }
}
