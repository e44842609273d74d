//! `/v1/chat/completions` and `/v1/completions`: a chat rendered through the model's
//! template, or prompts as they are, tokenized here (so the engine's thread only steps the
//! model) and answered whole or streamed.
//!
//! A chat's message text stays text: only the template's own markup becomes control tokens
//! (`hearth_engine::chat_prompt`). A raw prompt is tokenized as llama.cpp's server does,
//! control-token text included, since writing the template by hand is what it is for.

use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use hearth_engine::grammar::GrammarSpec;
use hearth_models::{ChatMessage, ToolCallFormat};
use serde_json::Value;

use super::answer::{Head, Kind};
use super::body::read_json;
use super::collect::collect;
use super::error::ApiError;
use super::models::{check_model, loaded};
use super::stream::stream_chunks;
use super::submit::submit;
use super::Shared;
use crate::openai::{
    ChatRequest, Completion, CompletionRequest, ErrorBody, PromptPart, Sampling, StreamEvent,
};
use crate::{AppState, Model};

/// A chat answered through the model's template.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The answer, or with `stream` its chunks as server-sent \
            events (`chat.completion.chunk`), then `data: [DONE]`", content(
            (Completion<'static> = "application/json"),
            (StreamEvent = "text/event-stream"),
        )),
        (status = 400, description = "A field out of its range or of the wrong type, named \
            in `param`", body = ErrorBody<'static>),
        (status = 401, description = "`--api-key` is set and the key is missing or wrong", body = ErrorBody<'static>),
        (status = 404, description = "A `model` not served here", body = ErrorBody<'static>),
        (status = 408, description = "The body took longer than `--body-timeout`", body = ErrorBody<'static>),
        (status = 413, description = "The body is over `--max-body`", body = ErrorBody<'static>),
        (status = 503, description = "Loading, stopping, or the queue is full", body = ErrorBody<'static>),
    ),
    security(("bearer" = []))
)]
pub async fn chat(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let m = loaded(&state)?;
    let body: Value = read_json(&state, body).await?;
    let request = ChatRequest::from_json(&body)?;
    check_model(m, &request.sampling)?;
    let messages: Vec<ChatMessage> = request.messages.into_iter().map(|m| m.0).collect();
    let tools = request.sampling.tool_request()?;
    let failed = |e: hearth_engine::Error| {
        ApiError::invalid(
            "messages",
            format!("the chat template failed on these messages: {e}"),
        )
    };
    let (prompt, format) = match tools.offered() {
        Some(offered) => {
            let (prompt, format) =
                hearth_engine::tool_chat_prompt(&m.tokenizer, &m.template, &messages, &offered)
                    .map_err(failed)?;
            (prompt, Some(format))
        }
        None => (
            hearth_engine::chat_prompt(&m.tokenizer, &m.template, &messages).map_err(failed)?,
            None,
        ),
    };
    // A forced call is held to a grammar of calls, which leaves no text for another
    // constraint to shape.
    let forced = format.and_then(|f| tools.forced(f));
    if forced.is_some() {
        if let Some((param, _)) = request.sampling.grammar()? {
            return Err(ApiError::invalid(
                param,
                format!("{param} constrains the text, and tool_choice asks for a tool call only"),
            ));
        }
    }
    respond(
        &state,
        m,
        vec![prompt],
        &request.sampling,
        Kind::Chat,
        format.map(|format| Tools { format, forced }),
    )
    .await
}

/// What a chat's tools change in its answer.
struct Tools {
    /// How the model writes a call: its calls are read from the text in this format.
    format: ToolCallFormat,
    /// The grammar of a forced call (`tool_choice` required or naming a function).
    forced: Option<GrammarSpec>,
}

/// Prompts continued as they are.
#[utoipa::path(
    post,
    path = "/v1/completions",
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "The answer, or with `stream` its chunks as server-sent \
            events, then `data: [DONE]`", content(
            (Completion<'static> = "application/json"),
            (StreamEvent = "text/event-stream"),
        )),
        (status = 400, description = "A field out of its range or of the wrong type, named \
            in `param`", body = ErrorBody<'static>),
        (status = 401, description = "`--api-key` is set and the key is missing or wrong", body = ErrorBody<'static>),
        (status = 404, description = "A `model` not served here", body = ErrorBody<'static>),
        (status = 408, description = "The body took longer than `--body-timeout`", body = ErrorBody<'static>),
        (status = 413, description = "The body is over `--max-body`", body = ErrorBody<'static>),
        (status = 503, description = "Loading, stopping, or the queue is full", body = ErrorBody<'static>),
    ),
    security(("bearer" = []))
)]
pub async fn completions(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let m = loaded(&state)?;
    let body: Value = read_json(&state, body).await?;
    let request = CompletionRequest::from_json(&body)?;
    check_model(m, &request.sampling)?;
    let n_vocab = m.tokenizer.vocab_size();
    let many = request.prompt.0.len() > 1;
    let prompts = request
        .prompt
        .0
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let param = if many {
                format!("prompt[{i}]")
            } else {
                "prompt".to_string()
            };
            let tokens = match part {
                PromptPart::Text(text) => m.tokenizer.encode(text),
                PromptPart::Tokens(ids) => {
                    if let Some(id) = ids.iter().find(|&&id| id as usize >= n_vocab) {
                        return Err(ApiError::invalid(
                            &param,
                            format!("{param}: token {id} is outside the vocabulary of {n_vocab}"),
                        ));
                    }
                    ids.clone()
                }
            };
            if tokens.is_empty() {
                return Err(ApiError::invalid(
                    &param,
                    format!("{param} is empty: it has no tokens"),
                ));
            }
            Ok(tokens)
        })
        .collect::<Result<Vec<_>, _>>()?;
    respond(
        &state,
        m,
        prompts,
        &request.sampling,
        Kind::Completion,
        None,
    )
    .await
}

async fn respond(
    state: &AppState,
    m: &Model,
    prompts: Vec<Vec<u32>>,
    sampling: &Sampling,
    kind: Kind,
    tools: Option<Tools>,
) -> Result<Response, ApiError> {
    let mut params = sampling.params(kind.default_max(), kind == Kind::Chat, prompts.len())?;
    params.generate.speculative = sampling.speculative(m.speculative)?;
    let mut asked_in = sampling.grammar()?.map(|(param, _)| param);
    let (tools, forced) = match tools {
        Some(Tools { format, forced }) => (Some(format), forced),
        None => (None, None),
    };
    if let Some(forced) = forced {
        params.generate.grammar = Some(forced);
        asked_in = Some("tool_choice");
    }
    // The engine compiles the grammar and names the kind of constraint in a refusal
    // (`json_schema` for any schema); the client is told the field it sent.
    let engine_names = params.generate.grammar.as_ref().map(|g| g.field());
    let accepted = submit(state, m, prompts, params, kind)
        .await
        .map_err(|mut e| {
            if e.param.is_some() && e.param.as_deref() == engine_names {
                e.param = asked_in.map(str::to_string);
            }
            e
        })?;
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
        tools,
    };
    if sampling.stream() {
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
