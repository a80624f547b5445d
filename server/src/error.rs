//! The one error type of the server, mapped to both an HTTP status and a gRPC code.

use axum::{
    Json,
    http::StatusCode,
    response::{IntoResponse, Response},
};

use tokenscope_core::api::ErrorBody;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller sent something wrong; the message says what and where.
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    /// It existed and was withdrawn (a revoked incident link).
    #[error("{0}")]
    Gone(String),
    /// No valid credential was presented (ingest key, read token).
    #[error("{0}")]
    Unauthenticated(String),
    /// The credential is valid but does not allow this (an ingest key sending for an instance
    /// it does not cover).
    #[error("{0}")]
    Forbidden(String),
    /// The request is valid but matches more than one thing (e.g. a request id on two instances).
    #[error("{0}")]
    Ambiguous(String),
    /// Something we depend on (the database, a port, the server the simulator sends to) cannot
    /// be reached; the caller may retry. The message names which.
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn http_status(&self) -> StatusCode {
        match self {
            Error::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Gone(_) => StatusCode::GONE,
            Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::Ambiguous(_) => StatusCode::CONFLICT,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            Error::InvalidArgument(_) => tonic::Code::InvalidArgument,
            Error::NotFound(_) | Error::Gone(_) => tonic::Code::NotFound,
            Error::Unauthenticated(_) => tonic::Code::Unauthenticated,
            Error::Forbidden(_) => tonic::Code::PermissionDenied,
            Error::Ambiguous(_) => tonic::Code::FailedPrecondition,
            Error::Unavailable(_) => tonic::Code::Unavailable,
            Error::Internal(_) => tonic::Code::Internal,
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        tokenscope_store::Error::from(e).into()
    }
}

impl From<tokenscope_store::Error> for Error {
    fn from(e: tokenscope_store::Error) -> Self {
        match e {
            tokenscope_store::Error::NotFound(m) => Error::NotFound(m),
            tokenscope_store::Error::Unavailable(m) => Error::Unavailable(m),
            tokenscope_store::Error::Internal(m) => Error::Internal(m),
        }
    }
}

impl From<tokenscope_sim::Error> for Error {
    fn from(e: tokenscope_sim::Error) -> Self {
        match e {
            tokenscope_sim::Error::InvalidArgument(m) => Error::InvalidArgument(m),
            tokenscope_sim::Error::Unavailable(m) => Error::Unavailable(m),
            tokenscope_sim::Error::Internal(m) => Error::Internal(m),
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> Self {
        tonic::Status::new(e.grpc_code(), e.to_string())
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if let Error::Internal(message) = &self {
            tracing::error!(%message, "internal error");
        }
        let body = ErrorBody {
            error: self.to_string(),
        };
        (self.http_status(), Json(body)).into_response()
    }
}
