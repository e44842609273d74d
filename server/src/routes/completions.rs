//! `/v1/chat/completions` and `/v1/completions`: a chat rendered through the model's
//! template, or a prompt as it is, tokenized here (so the engine's thread only steps the
//! model) and answered whole or streamed.

use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use hearth_models::ChatMessage;

use super::answer::{Head, Kind};
use super::body::read_json;
use super::collect::collect;
use super::error::ApiError;
use super::models::{check_model, loaded};
use super::stream::stream_chunks;
use super::submit::submit;
use super::Shared;
use crate::openai::{ChatRequest, CompletionRequest, Invalid, Prompt, Sampling};
use crate::{AppState, Model};

pub async fn chat(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let m = loaded(&state)?;
    let request: ChatRequest = read_json(&state, body).await?;
    check_model(m, &request.sampling)?;
    if request.messages.is_empty() {
        return Err(Invalid {
            param: "messages",
            message: "messages is empty".into(),
        }
        .into());
    }
    let messages: Vec<ChatMessage> = request
        .messages
        .iter()
        .map(|msg| {
            let text = msg.content.as_ref().map(|c| c.text()).unwrap_or_default();
            ChatMessage::new(&msg.role, &text)
        })
        .collect();
    let prompt =
        hearth_engine::chat_prompt(&m.tokenizer, &m.template, &messages).map_err(|e| ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("the chat template failed on these messages: {e}"),
            param: Some("messages"),
        })?;
    respond(&state, m, prompt, &request.sampling, Kind::Chat).await
}

pub async fn completions(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let m = loaded(&state)?;
    let request: CompletionRequest = read_json(&state, body).await?;
    check_model(m, &request.sampling)?;
    let text = match &request.prompt {
        Prompt::One(t) => t.clone(),
        Prompt::Many(v) if v.len() == 1 => v[0].clone(),
        Prompt::Many(_) => {
            return Err(Invalid {
                param: "prompt",
                message: "one prompt per request".into(),
            }
            .into())
        }
    };
    let prompt = m.tokenizer.encode(&text);
    respond(&state, m, prompt, &request.sampling, Kind::Completion).await
}

async fn respond(
    state: &AppState,
    m: &Model,
    prompt: Vec<u32>,
    sampling: &Sampling,
    kind: Kind,
) -> Result<Response, ApiError> {
    let params = sampling.params(kind.default_max(), kind == Kind::Chat)?;
    let accepted = submit(state, m, prompt, params).await?;
    let serial = state.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match kind {
        Kind::Chat => format!("chatcmpl-{serial}"),
        Kind::Completion => format!("cmpl-{serial}"),
    };
    let head = Head {
        id,
        model: m.id.clone(),
        created: now_secs(),
        kind,
        logprobs: accepted.logprobs.then(|| m.tokenizer.clone()),
    };
    if sampling.stream {
        let include_usage = sampling.include_usage();
        return Ok(Sse::new(stream_chunks(head, accepted, include_usage)).into_response());
    }
    collect(head, accepted).await
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
