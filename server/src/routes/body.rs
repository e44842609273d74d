//! A request's body, read here rather than by an extractor, so that every failure has the
//! status and JSON body OpenAI clients expect: 413 past `--max-body`, 408 for a body slower
//! than `--body-timeout`, 400 for JSON that does not parse or has a field of the wrong type.

use axum::body::Body;
use axum::http::StatusCode;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::AppState;

/// The body as `T` (serde's message names the field and its position when it does not
/// parse).
pub async fn read_json<T: DeserializeOwned>(state: &AppState, body: Body) -> Result<T, ApiError> {
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
