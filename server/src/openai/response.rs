//! What the server answers: completions and their stream chunks, log probabilities, the
//! model list, health and errors. `None` is `null` where OpenAI's API gives `null`.

use std::collections::BTreeMap;

use hearth_engine::sample::FinishReason;
use serde::Serialize;
use utoipa::ToSchema;

/// A whole answer (`chat.completion`, `text_completion`) or one chunk of a streamed one
/// (`chat.completion.chunk`, `text_completion`).
#[derive(Serialize, ToSchema, Debug)]
pub struct Completion<'a> {
    pub id: &'a str,
    /// `chat.completion`, `chat.completion.chunk` or `text_completion`.
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<Choice<'a>>,
    /// Whole answers, and a stream's last chunk when the request asked for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Serialize, ToSchema, Debug, Clone, Copy, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// One of a request's `n` completions, or a piece of one.
#[derive(Serialize, ToSchema, Debug)]
pub struct Choice<'a> {
    pub index: usize,
    #[serde(flatten)]
    pub content: ChoiceContent<'a>,
    pub logprobs: Option<ChoiceLogprobs>,
    /// `stop` or `length`; `null` in a stream's chunks before the last.
    pub finish_reason: Option<&'static str>,
}

/// Where a choice's text goes: the field named for the variant.
#[derive(Serialize, ToSchema, Debug)]
#[serde(rename_all = "snake_case")]
pub enum ChoiceContent<'a> {
    /// A chat's whole answer.
    Message(AssistantMessage<'a>),
    /// A chat's chunk: what its answer gained.
    Delta(Delta<'a>),
    /// A completion's text, whole or a chunk of it.
    Text(&'a str),
}

#[derive(Serialize, ToSchema, Debug)]
pub struct AssistantMessage<'a> {
    pub role: &'static str,
    /// `null` where the answer is only tool calls.
    pub content: Option<&'a str>,
    /// The tools the model called, where it called any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ResponseToolCall>,
}

/// A chat chunk's change; the role only in a choice's first chunk, the tool calls in the
/// chunk before the last.
#[derive(Serialize, ToSchema, Debug)]
pub struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ResponseToolCall>,
}

/// A tool call as OpenAI's API returns it; in a stream's delta, with its `index`.
#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ResponseToolCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: ResponseFunction,
}

#[derive(Serialize, ToSchema, Debug, Clone, PartialEq)]
pub struct ResponseFunction {
    pub name: String,
    /// The arguments as a JSON text.
    pub arguments: String,
}

impl ResponseToolCall {
    /// Call `name` with `arguments`, under a fresh id: nine letters and digits, which every
    /// template takes back (Mistral's insist on nine).
    pub fn new(name: String, arguments: &serde_json::Value) -> Self {
        use rand::Rng;
        let id: String = rand::thread_rng()
            .sample_iter(rand::distributions::Alphanumeric)
            .take(9)
            .map(char::from)
            .collect();
        ResponseToolCall {
            index: None,
            id,
            kind: "function",
            function: ResponseFunction {
                name,
                arguments: arguments.to_string(),
            },
        }
    }
}

/// The finish reason's name in OpenAI's API. A completion cut short by the server (it is
/// shutting down) reads as `length`: the one of OpenAI's reasons that tells a client the
/// answer ended before the model finished it. (A client that went away hears nothing.)
pub fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Eos | FinishReason::Stop => "stop",
        FinishReason::Length | FinishReason::Cancelled => "length",
    }
}

/// A choice's `logprobs`, in its endpoint's shape.
#[derive(Serialize, ToSchema, Debug)]
#[serde(untagged)]
pub enum ChoiceLogprobs {
    Chat(ChatLogprobs),
    Completion(CompletionLogprobs),
}

/// Chat's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
#[derive(Serialize, ToSchema, Debug)]
pub struct ChatLogprobs {
    pub content: Vec<ChatLogprob>,
}

/// A generated token's entry, with its alternatives.
#[derive(Serialize, ToSchema, Debug)]
pub struct ChatLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatAlternative>,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct ChatAlternative {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

/// The completions endpoint's `logprobs`: parallel lists, one entry per token.
#[derive(Serialize, ToSchema, Debug, Default)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f64>,
    /// Per token, its alternatives' text to log probability.
    pub top_logprobs: Vec<BTreeMap<String, f64>>,
    /// Per token, its offset in characters into the generated text.
    pub text_offset: Vec<usize>,
}

/// `/v1/models`: the one model served.
#[derive(Serialize, ToSchema, Debug)]
pub struct ModelList<'a> {
    pub object: &'static str,
    pub data: Vec<ModelCard<'a>>,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct ModelCard<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
}

impl<'a> ModelCard<'a> {
    pub fn new(id: &'a str, created: u64) -> Self {
        Self {
            id,
            object: "model",
            created,
            owned_by: "hearth",
        }
    }
}

impl<'a> ModelList<'a> {
    pub fn one(id: &'a str, created: u64) -> Self {
        Self {
            object: "list",
            data: vec![ModelCard::new(id, created)],
        }
    }
}

/// One server-sent event of a streamed answer, for the API's description: its `data` is a
/// chunk (`Completion` as JSON), an error (`ErrorBody` as JSON), or `[DONE]` last.
pub struct StreamEvent;

impl utoipa::PartialSchema for StreamEvent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let text = || ObjectBuilder::new().schema_type(Type::String);
        ObjectBuilder::new()
            .property(
                "data",
                text().description(Some(
                    "A chunk (`Completion`) or an error (`ErrorBody`) as JSON, or `[DONE]`",
                )),
            )
            .property("event", text())
            .required("data")
            .into()
    }
}

impl ToSchema for StreamEvent {}

/// `/health`: `ok`, or `loading` before the model is.
#[derive(Serialize, ToSchema, Debug)]
pub struct Health {
    pub status: &'static str,
}

/// OpenAI's error body: `{"error": {message, type, param, code}}`.
#[derive(Serialize, ToSchema, Debug)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Serialize, ToSchema, Debug)]
pub struct ErrorDetail<'a> {
    pub message: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub param: Option<&'a str>,
    pub code: Option<&'a str>,
}

impl<'a> ErrorBody<'a> {
    pub fn new(
        message: &'a str,
        kind: &'a str,
        param: Option<&'a str>,
        code: Option<&'a str>,
    ) -> Self {
        Self {
            error: ErrorDetail {
                message,
                kind,
                param,
                code,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, to_value};

    use super::*;

    #[test]
    fn the_small_bodies_have_openais_shapes() {
        assert_eq!(
            to_value(ModelList::one("m", 7)).unwrap(),
            json!({ "object": "list",
                    "data": [{ "id": "m", "object": "model", "created": 7, "owned_by": "hearth" }] })
        );
        assert_eq!(
            to_value(ErrorBody::new(
                "no",
                "invalid_request_error",
                Some("n"),
                None
            ))
            .unwrap(),
            json!({ "error": { "message": "no", "type": "invalid_request_error", "param": "n",
                               "code": null } })
        );
        assert_eq!(
            to_value(Health { status: "ok" }).unwrap(),
            json!({ "status": "ok" })
        );
    }

    #[test]
    fn every_finish_reason_is_one_openais_clients_know() {
        for f in [
            FinishReason::Eos,
            FinishReason::Stop,
            FinishReason::Length,
            FinishReason::Cancelled,
        ] {
            let name = finish_reason(f);
            assert!(["stop", "length"].contains(&name), "{f:?}: {name}");
        }
        assert_eq!(finish_reason(FinishReason::Cancelled), "length");
    }
}
