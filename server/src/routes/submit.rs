//! Prompts handed to the engine's service: refused with a status that says why, or taken
//! with one receiver for the events of all their completions (a batch of prompts numbers
//! its choices prompt by prompt, `n` each, as OpenAI's API does).

use hearth_engine::sched::RequestParams;
use hearth_engine::service::{Event, ServiceError, Submit};
use tokio::sync::{mpsc, oneshot};

use super::answer::Kind;
use super::error::ApiError;
use crate::{AppState, Model};

/// Requests the service took.
pub struct Accepted {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub prompt_tokens: usize,
    /// Completions in all: `n` per prompt.
    pub n: usize,
    /// Whether its tokens come with log probabilities.
    pub logprobs: bool,
}

/// Refuses what cannot fit before the service sees it (a prompt and `max_tokens` past the
/// context, naming the field), then submits each prompt within `--max-queue`. Should a
/// later prompt of a batch be refused, the earlier ones are cancelled as the receiver
/// drops.
pub async fn submit(
    state: &AppState,
    m: &Model,
    prompts: Vec<Vec<u32>>,
    params: RequestParams,
    kind: Kind,
) -> Result<Accepted, ApiError> {
    for prompt in &prompts {
        fits(m, prompt.len(), params.generate.max_tokens, kind)?;
    }
    let (events_tx, events) = mpsc::unbounded_channel();
    let n = params.n;
    let logprobs = params.generate.logprobs.is_some();
    let prompt_tokens = prompts.iter().map(Vec::len).sum();
    let count = prompts.len();
    for (p, prompt) in prompts.into_iter().enumerate() {
        let tx = events_tx.clone();
        let offset = p * n;
        let (accepted_tx, accepted) = oneshot::channel();
        let submission = Submit {
            prompt,
            params: params.clone(),
            sink: Box::new(move |event| tx.send(numbered(event, offset)).is_ok()),
            accepted: Box::new(move |r| {
                let _ = accepted_tx.send(r);
            }),
        };
        m.handle
            .submit_within(submission, state.options.max_queue)?;
        match accepted.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
            // The service dropped the request untaken: it is ending.
            Err(_) => return Err(ServiceError::ShuttingDown.into()),
        }
    }
    Ok(Accepted {
        events,
        prompt_tokens,
        n: n * count,
        logprobs,
    })
}

/// A prompt of `len` tokens and `max_tokens` to generate (the context's end where none is
/// given) must fit the context, with room for one token at least. Compared without adding,
/// so that no `max_tokens` can overflow past the check.
fn fits(m: &Model, len: usize, max_tokens: Option<usize>, kind: Kind) -> Result<(), ApiError> {
    let room = m.n_ctx.saturating_sub(len);
    let prompt_param = match kind {
        Kind::Chat => "messages",
        Kind::Completion => "prompt",
    };
    if room == 0 {
        return Err(ApiError::invalid(
            prompt_param,
            format!(
                "the prompt's {len} tokens fill the context of {} tokens; none is left to \
                 generate",
                m.n_ctx
            ),
        ));
    }
    match max_tokens {
        Some(max) if max > room => Err(ApiError::invalid(
            "max_tokens",
            format!(
                "the prompt's {len} tokens and {max} to generate exceed the context of {} \
                 tokens",
                m.n_ctx
            ),
        )),
        _ => Ok(()),
    }
}

/// `event` with its completion numbered from `offset`: its prompt's place in a batch.
fn numbered(mut event: Event, offset: usize) -> Event {
    match &mut event {
        Event::Token(e) => e.sample += offset,
        Event::Report(r) => r.sample += offset,
        Event::Failed(_) => {}
    }
    event
}
