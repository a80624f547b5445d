//! Secrets the servers of one database share (`secrets`): made once, then read by all.

use super::Store;
use crate::error::Result;

impl Store {
    /// The salt of scoped readers' aliases: made once per database (`gen_random_uuid` draws
    /// from the server's strong random source), then read by every server.
    pub async fn alias_salt(&self) -> Result<String> {
        sqlx::query!(
            "INSERT INTO secrets (name, value)
             VALUES ('alias_salt', replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
             ON CONFLICT (name) DO NOTHING"
        )
        .execute(&self.pool)
        .await?;
        Ok(
            sqlx::query_scalar!("SELECT value FROM secrets WHERE name = 'alias_salt'")
                .fetch_one(&self.pool)
                .await?,
        )
    }
}
