//! `/health`, `/metrics`, and the count of every answer by route and status behind it.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::Shared;
use crate::openai::Health;

/// 200 once the model is loaded, 503 before.
pub async fn health(State(state): State<Shared>) -> Response {
    match state.model() {
        Some(_) => Json(Health { status: "ok" }).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health { status: "loading" }),
        )
            .into_response(),
    }
}

pub async fn metrics(State(state): State<Shared>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

/// Counts every answer by route (`other` for paths that match none) and status.
pub async fn count(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let route = match request.extensions().get::<MatchedPath>() {
        Some(path) => path.as_str().to_string(),
        None => "other".to_string(),
    };
    let response = next.run(request).await;
    state.metrics.answered(&route, response.status().as_u16());
    response
}
