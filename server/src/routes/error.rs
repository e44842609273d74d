//! Errors as OpenAI's API gives them: a status and `{"error": {message, type, param, code}}`.
//! The service's errors become the status that says whose fault they are.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::service::ServiceError;

use crate::openai::{ErrorBody, Invalid};

/// An error as OpenAI's API gives it.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request's field at fault.
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// A 400 for field `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.to_string()),
        }
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: e.message,
            // The body as a whole is at fault: no field to name.
            param: (!e.param.is_empty()).then_some(e.param),
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        Self {
            status: status(&e),
            message: e.to_string(),
            param: param(&e).map(str::to_string),
        }
    }
}

/// The request's field a refusal is about: the engine names the options it checks; a
/// token outside the vocabulary is the prompt's; a prompt and length past the context or the
/// cache are the length's.
fn param(e: &ServiceError) -> Option<&str> {
    match e {
        ServiceError::Invalid(hearth_engine::Error::Options { field, .. }) => Some(field),
        ServiceError::Invalid(hearth_engine::Error::BadToken { .. }) => Some("prompt"),
        ServiceError::Invalid(_) => None,
        ServiceError::TooLong(_) => Some("max_tokens"),
        _ => None,
    }
}

/// The status of a request the service refused or failed: the client's fault (400), a
/// busy or stopping server (503, to retry), or the engine's (500).
pub fn status(e: &ServiceError) -> StatusCode {
    match e {
        ServiceError::Invalid(_) | ServiceError::TooLong(_) => StatusCode::BAD_REQUEST,
        ServiceError::ShuttingDown | ServiceError::Stopped | ServiceError::QueueFull { .. } => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ServiceError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
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
        let body = ErrorBody::new(&self.message, kind, self.param.as_deref(), code);
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    async fn answer(e: ServiceError) -> (StatusCode, Option<String>, serde_json::Value) {
        let response = ApiError::from(e).into_response();
        let status = response.status();
        let retry = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn each_service_error_has_its_status() {
        let context = hearth_engine::Error::ContextFull {
            needed: 300,
            used: 0,
            n_ctx: 128,
        };
        let field = || hearth_engine::Error::options("temperature", "must not be negative");
        let cases = [
            (ServiceError::Invalid(field()), StatusCode::BAD_REQUEST),
            (ServiceError::TooLong(context), StatusCode::BAD_REQUEST),
            (ServiceError::ShuttingDown, StatusCode::SERVICE_UNAVAILABLE),
            (ServiceError::Stopped, StatusCode::SERVICE_UNAVAILABLE),
            (
                ServiceError::QueueFull {
                    waiting: 9,
                    limit: 8,
                },
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                ServiceError::Failed(Arc::new(field())),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (e, want) in cases {
            let message = e.to_string();
            let (status, retry, body) = answer(e).await;
            assert_eq!(status, want, "{message}");
            // Clients are told to come back only when the server is busy or stopping.
            assert_eq!(retry.is_some(), want == StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(body["error"]["message"], message.as_str());
            // Every 400 names its field.
            let param = &body["error"]["param"];
            assert_eq!(
                param.is_string(),
                want == StatusCode::BAD_REQUEST,
                "{message}"
            );
            let kind = match want {
                StatusCode::BAD_REQUEST => "invalid_request_error",
                _ => "server_error",
            };
            assert_eq!(body["error"]["type"], kind, "{message}");
        }
    }

    #[test]
    fn the_service_words_its_refusals_as_the_server_always_has() {
        let full = ServiceError::QueueFull {
            waiting: 9,
            limit: 8,
        };
        assert_eq!(
            full.to_string(),
            "9 completions are queued (--max-queue 8); try again shortly"
        );
        assert_eq!(
            ServiceError::ShuttingDown.to_string(),
            "the engine is shutting down"
        );
        assert_eq!(ServiceError::Stopped.to_string(), "the engine stopped");
    }
}
