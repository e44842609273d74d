//! The API key: with `--api-key`, the API routes need `Authorization: Bearer KEY` with one
//! of the keys; `/health` and `/metrics` stay open.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::error::ApiError;
use super::Shared;

/// Lets a request through when its key is one of the keys, compared in constant time.
pub async fn authorize(
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
