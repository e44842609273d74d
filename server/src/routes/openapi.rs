//! `/openapi.json`: the API's OpenAPI description, derived from the request and response
//! types and each handler's annotation, so it cannot drift from what the server takes.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{completions, embeddings, health, models, rerank};
use crate::openai;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Hearth",
        description = "OpenAI's chat, completion and embeddings API over local models."
    ),
    paths(
        completions::chat,
        completions::completions,
        embeddings::embeddings,
        rerank::rerank,
        models::models,
        models::model,
        health::health,
        health::metrics,
    ),
    components(schemas(
        openai::Sampling,
        openai::ChatRequest,
        openai::CompletionRequest,
        openai::Completion,
        openai::EmbeddingList,
        openai::RerankList,
        openai::ErrorBody,
    )),
    modifiers(&Bearer)
)]
struct ApiDoc;

/// `--api-key`: `Authorization: Bearer KEY` on the API routes.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let scheme =
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build());
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", scheme);
    }
}

/// The description as JSON, built once.
pub fn json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| ApiDoc::openapi().to_pretty_json().unwrap_or_default())
}

pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    #[test]
    fn every_route_and_shape_is_described() {
        let doc: Value = serde_json::from_str(super::json()).unwrap();
        assert_eq!(doc["openapi"].as_str().map(|v| &v[..2]), Some("3."));
        for path in [
            "/v1/chat/completions",
            "/v1/completions",
            "/v1/models",
            "/v1/models/{id}",
            "/health",
            "/metrics",
        ] {
            assert!(doc["paths"][path].is_object(), "{path} is not described");
        }
        let schemas = &doc["components"]["schemas"];
        // Each request is its own fields and, flattened in, what both endpoints share.
        for (request, own) in [("ChatRequest", "messages"), ("CompletionRequest", "prompt")] {
            let text = serde_json::to_string(&schemas[request]).unwrap();
            assert!(text.contains("#/components/schemas/Sampling"), "{text}");
            assert!(
                text.contains(&format!("\"{own}\"")),
                "{request} lacks {own}"
            );
            // Each narrows `logprobs` to its own form.
            assert!(text.contains("\"logprobs\""), "{text}");
        }
        for field in [
            "temperature",
            "max_tokens",
            "stop",
            "seed",
            "stream",
            "logprobs",
        ] {
            assert!(
                schemas["Sampling"]["properties"][field].is_object(),
                "Sampling lacks {field}"
            );
        }
        // What the server takes, the description allows: `max_tokens` past an int64 (read
        // and saturated), and a completion's `logprobs: false` (none, as `null`).
        for field in ["max_tokens", "max_completion_tokens"] {
            let schema = &schemas["Sampling"]["properties"][field];
            assert!(schema["format"].is_null(), "{field}: {schema}");
        }
        let completion = serde_json::to_string(&schemas["CompletionRequest"]).unwrap();
        assert!(completion.contains("\"enum\":[false]"), "{completion}");
        assert!(schemas["ErrorBody"].is_object());
        assert!(schemas["Completion"].is_object());
    }
}
