//! What can go wrong simulating and delivering: bad arguments or input traces, a server that
//! cannot be reached or refuses, and failures writing files.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An argument or an input trace is wrong; the message names it.
    #[error("{0}")]
    InvalidArgument(String),
    /// The tokenscope server could not be reached, or did not take an export.
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
