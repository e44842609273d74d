//! Why the service refused a request or ended it early: the service's one error type, so
//! that a caller (the server) can answer each case as it should.

use std::sync::Arc;

/// A request the service did not take, or could not finish.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The service takes no more requests: its thread has ended or is ending.
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// The service ended before the request did: its events stopped coming.
    #[error("the engine stopped")]
    Stopped,
    /// More completions wait for a cache row than the caller allows (`--max-queue`).
    #[error("{waiting} completions are queued (--max-queue {limit}); try again shortly")]
    QueueFull { waiting: usize, limit: usize },
    /// The request cannot run as asked; the engine's error names the field or the token.
    #[error(transparent)]
    Invalid(hearth_model::Error),
    /// The prompt and the tokens to generate do not fit the context or the KV pool.
    #[error(transparent)]
    TooLong(hearth_model::Error),
    /// The engine failed while running the request. Shared: one failed step fails every
    /// request it ran.
    #[error(transparent)]
    Failed(Arc<hearth_model::Error>),
}

impl ServiceError {
    /// The engine's refusal of a request: too long for the context or the cache, or else
    /// invalid.
    pub(super) fn refused(e: hearth_model::Error) -> Self {
        match e {
            hearth_model::Error::ContextFull { .. } | hearth_model::Error::KvFull { .. } => {
                Self::TooLong(e)
            }
            _ => Self::Invalid(e),
        }
    }
}
