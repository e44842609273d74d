//! The HTTP routes: OpenAI's endpoints, health and metrics, with OpenAI-shaped errors.
//!
//! Bodies are read here rather than by an extractor, so that every failure has the status
//! and JSON body OpenAI clients expect: 413 past `--max-body`, 408 for a body slower than
//! `--body-timeout`, 400 for JSON that does not parse or has a field of the wrong type.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use hearth_models::ChatMessage;
use hearth_runtime::sample::Logprobs;
use hearth_runtime::sched::TokenEvent;
use hearth_runtime::service::{Event, Submit};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::logprobs;
use crate::openai::{self, ChatRequest, CompletionRequest, Invalid, Prompt, Sampling, Usage};
use crate::{AppState, Model};

type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authorize,
        ));
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .merge(api)
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

/// An error as OpenAI's API gives it.
pub struct ApiError {
    status: StatusCode,
    message: String,
    param: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
        }
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: e.message,
            param: Some(e.param),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (kind, code) = match self.status {
            StatusCode::UNAUTHORIZED => ("authentication_error", Some("invalid_api_key")),
            StatusCode::NOT_FOUND => ("invalid_request_error", Some("not_found")),
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                ("server_error", Some("overloaded"))
            }
            s if s.is_server_error() => ("server_error", None),
            _ => ("invalid_request_error", None),
        };
        let body = openai::error_body(&self.message, kind, self.param, code);
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}

/// Counts every answer by route and status for `/metrics`.
async fn count(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let route = match request.extensions().get::<axum::extract::MatchedPath>() {
        Some(path) => path.as_str().to_string(),
        None => "other".to_string(),
    };
    let response = next.run(request).await;
    state.metrics.answered(&route, response.status().as_u16());
    response
}

/// With `--api-key`, the API routes need `Authorization: Bearer KEY` with one of the keys,
/// compared in constant time.
async fn authorize(
    State(state): State<Shared>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if state.options.api_keys.is_empty() {
        return Ok(next.run(request).await);
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // Every key is compared, whatever matched.
    let ok = state
        .options
        .api_keys
        .iter()
        .fold(false, |ok, key| ok | same(key.as_bytes(), given.as_bytes()));
    if !ok {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or wrong API key (Authorization: Bearer KEY)",
        ));
    }
    Ok(next.run(request).await)
}

/// Equal bytes, in time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    let diff = a
        .iter()
        .zip(b)
        .fold(a.len() ^ b.len(), |d, (x, y)| d | usize::from(x ^ y));
    diff == 0
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

async fn health(State(state): State<Shared>) -> Response {
    match state.model() {
        Some(_) => Json(json!({ "status": "ok" })).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "loading" })),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

fn loaded(state: &AppState) -> Result<&Model, ApiError> {
    state.model().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model is still loading",
        )
    })
}

async fn models(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let m = loaded(&state)?;
    Ok(Json(json!({
        "object": "list",
        "data": [{ "id": m.id, "object": "model", "created": m.created, "owned_by": "hearth" }],
    })))
}

async fn embeddings(State(state): State<Shared>) -> ApiError {
    let what = match state.model() {
        Some(m) => format!("`{}` is a decoder-only language model", m.id),
        None => "the model is still loading".into(),
    };
    ApiError::new(
        StatusCode::BAD_REQUEST,
        format!("{what}; embeddings need an encoder model, which this server does not run"),
    )
}

/// The body as `T`: 413 past the limit, 408 when it comes too slowly, 400 when it does not
/// parse (serde's message names the field and its position).
async fn read_json<T: DeserializeOwned>(state: &AppState, body: Body) -> Result<T, ApiError> {
    let limit = state.options.max_body;
    let read = async move {
        let mut bytes = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|e| {
                ApiError::new(StatusCode::BAD_REQUEST, format!("reading the body: {e}"))
            })?;
            if bytes.len() + piece.len() > limit {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is over {limit} bytes (--max-body)"),
                ));
            }
            bytes.extend_from_slice(&piece);
        }
        Ok(bytes)
    };
    let timeout = state.options.body_timeout;
    let bytes = match tokio::time::timeout(timeout, read).await {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body took longer than {timeout:?} to arrive"),
            ))
        }
        Ok(result) => result?,
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")))
}

/// The model a request names must be this one (any name when it names none).
fn check_model(m: &Model, sampling: &Sampling) -> Result<(), ApiError> {
    match &sampling.model {
        Some(name) if name != &m.id && !m.aliases.contains(name) => Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("model `{name}` is not served here; `{}` is", m.id),
            param: Some("model"),
        }),
        _ => Ok(()),
    }
}

/// A request taken by the engine: its events, one receiver for all its completions.
struct Accepted {
    events: mpsc::UnboundedReceiver<Event>,
    prompt_tokens: usize,
    n: usize,
    /// Whether its tokens come with log probabilities.
    logprobs: bool,
}

async fn submit(
    state: &AppState,
    m: &Model,
    prompt: Vec<u32>,
    sampling: &Sampling,
    kind: Kind,
) -> Result<Accepted, ApiError> {
    let default_max = match kind {
        Kind::Chat => None,
        Kind::Completion => Some(16),
    };
    let params = sampling.params(default_max, kind == Kind::Chat)?;
    let max_queue = state.options.max_queue;
    if m.handle.waiting() >= max_queue {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} completions are queued (--max-queue {max_queue}); try again shortly",
                m.handle.waiting(),
            ),
        ));
    }
    let wanted = prompt.len() + params.generate.max_tokens.unwrap_or(1);
    if wanted > m.n_ctx {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "the prompt's {} tokens and {} to generate exceed the context of {} tokens",
                prompt.len(),
                params.generate.max_tokens.unwrap_or(1),
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
    let sent = m.handle.submit(Submit {
        prompt,
        params,
        sink: Box::new(move |event| events_tx.send(event).is_ok()),
        accepted: Box::new(move |r| {
            let _ = accepted_tx.send(r);
        }),
    });
    let refused = |message: String| ApiError::new(StatusCode::BAD_REQUEST, message);
    match (sent, accepted.await) {
        (true, Ok(Ok(_))) => Ok(Accepted {
            events,
            prompt_tokens,
            n,
            logprobs,
        }),
        (true, Ok(Err(e))) => Err(refused(e)),
        _ => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine is shutting down",
        )),
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Which endpoint a response is for: the object names and where a choice's text goes.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

async fn chat(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
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
    let prompt = hearth_runtime::engine::chat_prompt(&m.tokenizer, &m.template, &messages)
        .map_err(|e| ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("the chat template failed on these messages: {e}"),
            param: Some("messages"),
        })?;
    respond(&state, m, prompt, &request.sampling, Kind::Chat).await
}

async fn completions(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
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
    let accepted = submit(state, m, prompt, sampling, kind).await?;
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
    collect(head, accepted)
        .await
        .map(|v| Json(v).into_response())
}

/// What every chunk and response repeats.
#[derive(Clone)]
struct Head {
    id: String,
    model: String,
    created: u64,
    kind: Kind,
    /// Where log probabilities were asked for: the tokenizer that spells their tokens.
    logprobs: Option<Arc<hearth_models::Tokenizer>>,
}

impl Head {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn wrap(&self, chunk: bool, choices: Vec<Value>, usage: Option<Usage>) -> Value {
        let mut v = json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = json!(u);
        }
        v
    }
}

/// A non-streamed answer: every completion's text, then the response.
async fn collect(head: Head, mut accepted: Accepted) -> Result<Value, ApiError> {
    let n = accepted.n;
    let mut texts = vec![String::new(); n];
    let mut logprobs: Vec<Vec<Logprobs>> = vec![Vec::new(); n];
    let mut finish: Vec<Option<&'static str>> = vec![None; n];
    let mut generated = 0;
    while finish.iter().any(Option::is_none) {
        match accepted.events.recv().await {
            Some(Event::Token(e)) => {
                generated += usize::from(e.token.is_some());
                texts[e.sample].push_str(&e.text);
                if let (Some(lp), Some(tokenizer)) = (e.logprobs, &head.logprobs) {
                    if logprobs::reported(tokenizer, &lp) {
                        logprobs[e.sample].push(lp);
                    }
                }
                if let Some(f) = e.finish {
                    finish[e.sample] = Some(openai::finish_reason(f));
                }
            }
            Some(Event::Report(_)) => {}
            Some(Event::Failed(e)) => {
                return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))
            }
            None => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the engine stopped",
                ))
            }
        }
    }
    let choices = (0..n)
        .map(|i| {
            let lp = head.render_logprobs(&logprobs[i], &mut 0);
            choice(head.kind, i, &texts[i], finish[i], false, lp)
        })
        .collect();
    let usage = Usage {
        prompt_tokens: accepted.prompt_tokens,
        completion_tokens: generated,
        total_tokens: accepted.prompt_tokens + generated,
    };
    Ok(head.wrap(false, choices, Some(usage)))
}

impl Head {
    /// `logprobs` of a choice, or of a chunk of it: `null` where none were asked for.
    fn render_logprobs(&self, items: &[Logprobs], offset: &mut usize) -> Value {
        match (&self.logprobs, self.kind) {
            (None, _) => Value::Null,
            (Some(t), Kind::Chat) => logprobs::chat(t, items),
            (Some(t), Kind::Completion) => logprobs::completion(t, items, offset),
        }
    }
}

/// One choice: a message (chat), a delta (chat chunk) or text (completion).
fn choice(
    kind: Kind,
    index: usize,
    text: &str,
    finish: Option<&str>,
    chunk: bool,
    logprobs: Value,
) -> Value {
    match (kind, chunk) {
        (Kind::Chat, false) => json!({
            "index": index,
            "message": { "role": "assistant", "content": text },
            "logprobs": logprobs,
            "finish_reason": finish,
        }),
        (Kind::Chat, true) => json!({
            "index": index,
            "delta": { "content": text },
            "logprobs": logprobs,
            "finish_reason": finish,
        }),
        (Kind::Completion, _) => json!({
            "index": index,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish,
        }),
    }
}

/// Where a streamed answer stands.
struct Progress {
    head: Head,
    accepted: Accepted,
    open: usize,
    /// Per choice: whether its first chunk went out (chat's gives the role), and where its
    /// next token's text starts (completions' `text_offset`).
    started: Vec<bool>,
    offsets: Vec<usize>,
    generated: usize,
    include_usage: bool,
    done: bool,
}

/// Server-sent events: each token's text as a chunk (a chat's first chunk per choice gives
/// the role), a last chunk with the finish reason, the usage when asked, then `[DONE]`.
/// Dropping the stream (the client went away) drops the receiver, which cancels the request.
fn stream_chunks(
    head: Head,
    accepted: Accepted,
    include_usage: bool,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let n = accepted.n;
    let state = Progress {
        head,
        accepted,
        open: n,
        started: vec![false; n],
        offsets: vec![0; n],
        generated: 0,
        include_usage,
        done: false,
    };
    let json_event = |v: Value| SseEvent::default().data(v.to_string());
    stream::unfold(state, move |mut s| async move {
        if s.done {
            return None;
        }
        let mut out: Vec<SseEvent> = Vec::new();
        if s.open == 0 {
            if s.include_usage {
                let usage = Usage {
                    prompt_tokens: s.accepted.prompt_tokens,
                    completion_tokens: s.generated,
                    total_tokens: s.accepted.prompt_tokens + s.generated,
                };
                out.push(json_event(s.head.wrap(true, Vec::new(), Some(usage))));
            }
            out.push(SseEvent::default().data("[DONE]"));
            s.done = true;
            return Some((out, s));
        }
        match s.accepted.events.recv().await {
            Some(Event::Token(e)) => {
                out.extend(s.chunks_for(&e).into_iter().map(json_event));
                s.generated += usize::from(e.token.is_some());
                if e.finish.is_some() {
                    s.open -= 1;
                }
            }
            Some(Event::Report(_)) => {}
            // The engine failed or stopped: an error event, and the stream ends.
            failed => {
                let message = match failed {
                    Some(Event::Failed(e)) => e,
                    _ => "the engine stopped".to_string(),
                };
                out.push(json_event(openai::error_body(
                    &message,
                    "server_error",
                    None,
                    None,
                )));
                s.done = true;
            }
        }
        Some((out, s))
    })
    .flat_map(|events| stream::iter(events.into_iter().map(Ok)))
}

impl Progress {
    /// The chunks one token event makes: the role first (chat), then its text and log
    /// probabilities, then the finish.
    fn chunks_for(&mut self, e: &TokenEvent) -> Vec<Value> {
        let head = &self.head;
        let mut out = Vec::new();
        let i = e.sample;
        if head.kind == Kind::Chat && !self.started[i] {
            self.started[i] = true;
            let role = json!({ "index": i, "delta": { "role": "assistant", "content": "" },
                "logprobs": null, "finish_reason": null });
            out.push(head.wrap(true, vec![role], None));
        }
        let lp: Vec<Logprobs> = match (&e.logprobs, &head.logprobs) {
            (Some(lp), Some(t)) if logprobs::reported(t, lp) => vec![lp.clone()],
            _ => Vec::new(),
        };
        if !e.text.is_empty() || !lp.is_empty() {
            let lp = head.render_logprobs(&lp, &mut self.offsets[i]);
            let piece = choice(head.kind, i, &e.text, None, true, lp);
            out.push(head.wrap(true, vec![piece], None));
        }
        if let Some(f) = e.finish {
            let finish = Some(openai::finish_reason(f));
            let last = choice(head.kind, i, "", finish, true, Value::Null);
            out.push(head.wrap(true, vec![last], None));
        }
        out
    }
}
