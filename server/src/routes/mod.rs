//! The HTTP routes: OpenAI's endpoints, health and metrics, with OpenAI-shaped errors.
//!
//! - `completions.rs`: `/v1/chat/completions` and `/v1/completions`: a prompt handed to the
//!   service (`submit.rs`), answered whole (`collect.rs`) or streamed (`stream.rs`), in the
//!   shapes both share (`answer.rs`);
//! - `models.rs`: `/v1/models` and which model a request may name;
//! - `embeddings.rs`: `/v1/embeddings`;
//! - `rerank.rs`: `/v1/rerank` (and llama.cpp's `/rerank`, `/v1/reranking`);
//! - `health.rs`: `/health`, `/metrics` and the count of answers behind it;
//! - `openapi.rs`: `/openapi.json`, the API's description derived from its types;
//! - `auth.rs`: the API key;
//! - `body.rs`: reading a request's body, with every failure an OpenAI-shaped error;
//! - `error.rs`: errors as OpenAI's API gives them, the service's among them.

mod answer;
mod auth;
mod body;
mod collect;
mod completions;
mod embeddings;
mod error;
mod health;
mod models;
mod openapi;
mod rerank;
mod stream;
mod submit;

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use axum::Router;

use crate::AppState;
use error::ApiError;

type Shared = Arc<AppState>;

pub fn router(state: Shared) -> Router {
    let api = Router::new()
        .route("/v1/models", get(models::models))
        .route("/v1/models/{id}", get(models::model))
        .route("/v1/chat/completions", post(completions::chat))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/v1/reranking", post(rerank::rerank))
        .route("/rerank", post(rerank::rerank))
        .layer(from_fn_with_state(state.clone(), auth::authorize));
    Router::new()
        .route("/health", get(health::health))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(openapi::openapi))
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), health::count))
        .with_state(state)
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

/// A route that exists, asked with another method: OpenAI's error body, not an empty one.
async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} {} is not allowed",
            request.method(),
            request.uri().path()
        ),
    )
}
