//! The models served: `/v1/models`, `/v1/models/{id}`, and which model a request may name.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::Shared;
use crate::openai::{ErrorBody, ModelCard, ModelList, Sampling};
use crate::{AppState, Model};

/// The model, or 503 while it loads (400 where the server runs an embedding model alone).
pub fn loaded(state: &AppState) -> Result<&Model, ApiError> {
    if let Some(em) = state.embedder().filter(|em| em.alone) {
        return Err(ApiError::invalid(
            "model",
            format!(
                "`{}` is an embedding model, the only one served here: use /v1/embeddings",
                em.id
            ),
        ));
    }
    state.model().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model is still loading",
        )
    })
}

#[utoipa::path(
    get,
    path = "/v1/models",
    responses(
        (status = 200, description = "The one model served", body = ModelList<'static>),
        (status = 401, description = "`--api-key` is set and the key is missing or wrong", body = ErrorBody<'static>),
        (status = 503, description = "The model is still loading", body = ErrorBody<'static>),
    ),
    security(("bearer" = []))
)]
pub async fn models(State(state): State<Shared>) -> Result<Response, ApiError> {
    let mut list = ModelList {
        object: "list",
        data: Vec::new(),
    };
    if let Some(em) = state.embedder() {
        list.data.push(ModelCard::new(&em.id, em.created));
    }
    if list.data.is_empty() || state.embedder().is_some_and(|em| !em.alone) {
        let m = loaded(&state)?;
        list.data.insert(0, ModelCard::new(&m.id, m.created));
    }
    Ok(Json(list).into_response())
}

/// The model by its id or one of its aliases; 404 for any other.
#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    params(("id" = String, Path, description = "The model's id or an alias")),
    responses(
        (status = 200, description = "The model", body = ModelCard<'static>),
        (status = 401, description = "`--api-key` is set and the key is missing or wrong", body = ErrorBody<'static>),
        (status = 404, description = "Not the model served", body = ErrorBody<'static>),
        (status = 503, description = "The model is still loading", body = ErrorBody<'static>),
    ),
    security(("bearer" = []))
)]
pub async fn model(
    State(state): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if let Some(em) = state.embedder().filter(|em| em.named(&id)) {
        return Ok(Json(ModelCard::new(&em.id, em.created)).into_response());
    }
    let m = loaded(&state)?;
    if id != m.id && !m.aliases.contains(&id) {
        return Err(not_served(m, &id));
    }
    Ok(Json(ModelCard::new(&m.id, m.created)).into_response())
}

fn not_served(m: &Model, name: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("model `{name}` is not served here; `{}` is", m.id),
        param: Some("model".into()),
    }
}

/// The model a request names must be this one (any name when it names none).
pub fn check_model(m: &Model, sampling: &Sampling) -> Result<(), ApiError> {
    match &sampling.model {
        Some(name) if name != &m.id && !m.aliases.contains(name) => Err(not_served(m, name)),
        _ => Ok(()),
    }
}
