//! `/v1/rerank` (and llama.cpp's `/rerank` and `/v1/reranking`): documents ordered by their
//! relevance to a query, as the served cross-encoder scores each query-document pair. The
//! model runs on a blocking thread, one request at a time, its pairs as one batch.

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
    ErrorBody, RerankDocument, RerankList, RerankRequest, RerankResult, RerankUsage,
};

#[utoipa::path(
    post,
    path = "/v1/rerank",
    request_body(content = Value, description = "`query`, `documents` (strings or objects with a `text`), `top_n`, `return_documents`, `model`"),
    responses(
        (status = 200, description = "Documents by relevance, highest first", body = RerankList),
        (status = 400, description = "A field is missing or wrong, or the server runs no cross-encoder", body = ErrorBody<'static>),
        (status = 401, description = "`--api-key` is set and the key is missing or wrong", body = ErrorBody<'static>),
        (status = 404, description = "`model` names a model not served here", body = ErrorBody<'static>),
    ),
    security(("bearer" = []))
)]
pub async fn rerank(State(state): State<Shared>, body: Body) -> Result<Response, ApiError> {
    let Some(em) = state.embedder() else {
        return Err(ApiError::invalid(
            "model",
            "reranking needs a cross-encoder (`hearth serve -m` or `--embedding-model`)",
        ));
    };
    let body: Value = read_json(&state, body).await?;
    let request = RerankRequest::from_json(&body)?;
    if let Some(name) = request.model.as_deref().filter(|n| !em.named(n)) {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("model `{name}` is not served here; `{}` is", em.id),
            param: Some("model".into()),
        });
    }
    let embedder = em.embedder.clone();
    let id = em.id.clone();
    let done = tokio::task::spawn_blocking(move || {
        let mut e = embedder.lock().unwrap_or_else(|p| p.into_inner());
        if !e.reranks() {
            return Err(ApiError::invalid(
                "model",
                format!(
                    "`{id}` embeds but has no classifier head: reranking needs a cross-encoder"
                ),
            ));
        }
        let pairs: Vec<_> = request
            .documents
            .iter()
            .map(|d| e.tokenize_pair(&request.query, d))
            .collect();
        let tokens: usize = pairs.iter().map(|p| p.tokens.len()).sum();
        let scores = e
            .score(&pairs)
            .map_err(|err| ApiError::invalid("documents", err.to_string()))?;
        let order = hearth_engine::embed::ranking(&scores, request.top_n);
        let mut documents = request.documents;
        let results = order
            .into_iter()
            .map(|i| RerankResult {
                index: i,
                relevance_score: scores[i],
                document: request.return_documents.then(|| RerankDocument {
                    text: std::mem::take(&mut documents[i]),
                }),
            })
            .collect();
        Ok(RerankList {
            object: "list",
            model: id,
            results,
            usage: RerankUsage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        })
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(done).into_response())
}
