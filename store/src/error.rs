//! What can go wrong storing and reading: a thing that is not there, a database that cannot be
//! reached (the caller may retry), and everything else (corrupt blocks, failed migrations).

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    NotFound(String),
    /// The database cannot be reached, or asked for the transaction again; the caller may retry.
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
                Error::Unavailable(format!("database unavailable: {e}"))
            }
            // Serialization failure and deadlock: the same batch succeeds when sent again.
            sqlx::Error::Database(ref db)
                if matches!(db.code().as_deref(), Some("40001" | "40P01")) =>
            {
                Error::Unavailable(format!("database unavailable: {e}; retry the batch"))
            }
            other => Error::Internal(other.to_string()),
        }
    }
}
