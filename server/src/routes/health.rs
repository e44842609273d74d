//! `/health`, `/metrics`, and the count of every answer by route and status behind it.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::Shared;
use crate::openai::Health;

/// 200 once the model is loaded, 503 before.
#[utoipa::path(
    get,
    path = "/health",
    responses(
        (status = 200, description = "`ok`: the model is loaded", body = Health),
        (status = 503, description = "`loading`", body = Health),
    )
)]
pub async fn health(State(state): State<Shared>) -> Response {
    let ready = state.model().is_some() || state.embedder().is_some_and(|em| em.alone);
    match ready {
        true => Json(Health { status: "ok" }).into_response(),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health { status: "loading" }),
        )
            .into_response(),
    }
}

/// The server's metrics in OpenMetrics' text format.
#[utoipa::path(
    get,
    path = "/metrics",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String))
)]
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
