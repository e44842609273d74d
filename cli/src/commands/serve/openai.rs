//! OpenAI's API shapes: the requests `/v1/chat/completions` and `/v1/completions` take, the
//! responses and stream chunks they give, and errors. Fields a request may leave out take
//! llama.cpp's server defaults for sampling; unknown fields are ignored, as OpenAI's API
//! does; a known field of the wrong type is a 400 naming it.

use hearth_runtime::sample::{FinishReason, GenerateParams, SamplerParams};
use hearth_runtime::sched::RequestParams;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// `stop`: one string or several.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// A message's content: text, or parts of which the text ones are read.
#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize, Debug, Clone)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

#[derive(Deserialize, Debug, Clone, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// What both endpoints share: sampling and length.
#[derive(Deserialize, Debug, Clone, Default)]
pub struct Sampling {
    pub model: Option<String>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<usize>,
    pub max_tokens: Option<usize>,
    pub max_completion_tokens: Option<usize>,
    pub stop: Option<Stop>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub logprobs: Option<Value>,
    pub top_logprobs: Option<u32>,
    // llama.cpp's server's extensions.
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
}

#[derive(Deserialize, Debug, Clone)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum Prompt {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Debug, Clone)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub sampling: Sampling,
}

impl Content {
    pub fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// A request that cannot be served as asked: a 400 naming the field.
pub struct Invalid {
    pub param: &'static str,
    pub message: String,
}

fn invalid(param: &'static str, message: impl Into<String>) -> Invalid {
    Invalid {
        param,
        message: message.into(),
    }
}

impl Sampling {
    /// The scheduler's request; `default_max` when the request gives no length (OpenAI's
    /// completions default to 16 tokens, chat to the context's end).
    pub fn params(&self, default_max: Option<usize>) -> Result<RequestParams, Invalid> {
        for (param, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if v.is_some_and(|v| v != 0.0) {
                return Err(invalid(
                    param,
                    format!("{param} is not supported; use repeat_penalty (llama.cpp's)"),
                ));
            }
        }
        let logprobs = match &self.logprobs {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(_) => true,
        };
        if logprobs || self.top_logprobs.is_some_and(|n| n > 0) {
            return Err(invalid(
                "logprobs",
                "log probabilities are not supported yet",
            ));
        }
        let n = self.n.unwrap_or(1);
        if n == 0 || n > 16 {
            return Err(invalid("n", format!("n is {n}; it must be 1 to 16")));
        }
        let base = SamplerParams::default();
        let sampler = SamplerParams {
            temperature: self.temperature.unwrap_or(base.temperature),
            top_p: self.top_p.unwrap_or(base.top_p),
            top_k: self.top_k.unwrap_or(base.top_k),
            min_p: self.min_p.unwrap_or(base.min_p),
            repeat_penalty: self.repeat_penalty.unwrap_or(base.repeat_penalty),
            seed: self.seed.unwrap_or_else(rand::random),
            ..base
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > 4 || stop.iter().any(String::is_empty) {
            return Err(invalid("stop", "at most 4 stop strings, none empty"));
        }
        Ok(RequestParams {
            generate: GenerateParams {
                max_tokens: self
                    .max_completion_tokens
                    .or(self.max_tokens)
                    .or(default_max),
                sampler,
                stop,
                ignore_eos: false,
            },
            n,
        })
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}

pub fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Eos | FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
    }
}

#[derive(Serialize, Debug, Clone, Copy, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// OpenAI's error body.
pub fn error_body(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
}
