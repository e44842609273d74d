//! `/v1/embeddings`: texts or token ids to vectors with the embedding model the server runs
//! (`--embedding-model`, or an encoder given as the model). The model runs on a blocking
//! thread, one request at a time, each request's inputs as one batch.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::body::read_json;
use super::error::ApiError;
use super::Shared;
use crate::openai::{
    Embedding, EmbeddingList, EmbeddingRequest, EmbeddingUsage, EmbeddingValue, ErrorBody,
    PromptPart,
};

#[utoipa::path(
    post,
    path = "/v1/embeddings",
    request_body(content = Value, description = "OpenAI's embeddings request: `input` (a string, strings, token ids, or arrays of them), `model`, `encoding_format` (`float` or `base64`), `dimensions`; `truncate` (default true) cuts inputs longer than the model reads"),
    responses(
        (status = 200, description = "One vector per input, in order", body = EmbeddingList),
        (status = 400, description = "A field is missing or wrong, or the server runs no embedding model", body = ErrorBody<'static>),
        (status = 401, description = "`--api-key` is set and the key is missing or wrong", body = ErrorBody<'static>),
        (status = 404, description = "`model` names a model not served here", body = ErrorBody<'static>),
    ),
    security(("bearer" = []))
)]
pub async fn embeddings(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let Some(em) = state.embedder() else {
        let what = match state.model() {
            Some(m) => format!("`{}` is a language model", m.id),
            None => "the model is still loading".into(),
        };
        return Err(ApiError::invalid(
            "model",
            format!(
                "{what}; embeddings need an embedding model (`hearth serve --embedding-model`)"
            ),
        ));
    };
    let body: Value = read_json(&state, body).await?;
    let request = EmbeddingRequest::from_json(&body)?;
    if let Some(name) = request.model.as_deref().filter(|n| !em.named(n)) {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("model `{name}` is not served here; `{}` embeds", em.id),
            param: Some("model".into()),
        });
    }
    let embedder = em.embedder.clone();
    let id = em.id.clone();
    let done = tokio::task::spawn_blocking(move || {
        let mut e = embedder.lock().unwrap_or_else(|p| p.into_inner());
        let (dims, max) = (e.info().dims, e.info().max_tokens);
        if let Some(d) = request.dimensions.filter(|&d| d > dims) {
            return Err(ApiError::invalid(
                "dimensions",
                format!("{d} dimensions; the model's vectors have {dims}"),
            ));
        }
        let mut ids = Vec::with_capacity(request.input.0.len());
        for (i, part) in request.input.0.iter().enumerate() {
            let tokens = match part {
                PromptPart::Text(t) if t.is_empty() => {
                    return Err(ApiError::invalid(
                        &format!("input[{i}]"),
                        format!("input[{i}] is empty"),
                    ))
                }
                PromptPart::Text(t) => e.tokenize(t),
                PromptPart::Tokens(t) => t.clone(),
            };
            if !request.truncate && tokens.len() > max {
                return Err(ApiError::invalid(
                    &format!("input[{i}]"),
                    format!(
                        "input[{i}] is {} tokens; the model reads at most {max} (send \
                         `truncate: true` to cut it)",
                        tokens.len()
                    ),
                ));
            }
            ids.push(tokens);
        }
        let vectors = e
            .embed_tokens(&ids, true)
            .map_err(|err| ApiError::invalid("input", err.to_string()))?;
        let tokens: usize = ids.iter().map(|t| t.len().min(max)).sum();
        let data = vectors
            .into_iter()
            .enumerate()
            .map(|(index, mut v)| {
                if let Some(d) = request.dimensions {
                    v.truncate(d);
                    hearth_engine::embed::l2_normalize(&mut v);
                }
                Embedding {
                    object: "embedding",
                    index,
                    embedding: EmbeddingValue::new(v, request.encoding),
                }
            })
            .collect();
        Ok(EmbeddingList {
            object: "list",
            data,
            model: id,
            usage: EmbeddingUsage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        })
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(done).into_response())
}
