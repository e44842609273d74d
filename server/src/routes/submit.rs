//! A prompt handed to the engine's service: refused with a status that says why, or taken
//! with one receiver for the events of all its completions.

use axum::http::StatusCode;
use hearth_engine::sched::RequestParams;
use hearth_engine::service::{Event, ServiceError, Submit};
use tokio::sync::{mpsc, oneshot};

use super::error::ApiError;
use crate::{AppState, Model};

/// A request the service took.
pub struct Accepted {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub prompt_tokens: usize,
    pub n: usize,
    /// Whether its tokens come with log probabilities.
    pub logprobs: bool,
}

/// Refuses what cannot wait or cannot fit before the service sees it: a full queue, or a
/// prompt and `max_tokens` past the context (naming both).
pub async fn submit(
    state: &AppState,
    m: &Model,
    prompt: Vec<u32>,
    params: RequestParams,
) -> Result<Accepted, ApiError> {
    m.handle.check_queue(state.options.max_queue)?;
    let max_tokens = params.generate.max_tokens.unwrap_or(1);
    if prompt.len() + max_tokens > m.n_ctx {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "the prompt's {} tokens and {max_tokens} to generate exceed the context of {} \
                 tokens",
                prompt.len(),
                m.n_ctx
            ),
            param: Some("max_tokens"),
        });
    }
    let (events_tx, events) = mpsc::unbounded_channel();
    let (accepted_tx, accepted) = oneshot::channel();
    let n = params.n;
    let logprobs = params.generate.logprobs.is_some();
    let prompt_tokens = prompt.len();
    m.handle.submit(Submit {
        prompt,
        params,
        sink: Box::new(move |event| events_tx.send(event).is_ok()),
        accepted: Box::new(move |r| {
            let _ = accepted_tx.send(r);
        }),
    })?;
    match accepted.await {
        Ok(Ok(_)) => Ok(Accepted {
            events,
            prompt_tokens,
            n,
            logprobs,
        }),
        Ok(Err(e)) => Err(e.into()),
        // The service dropped the request untaken: it is ending.
        Err(_) => Err(ServiceError::ShuttingDown.into()),
    }
}
