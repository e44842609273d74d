//! The requests `/v1/chat/completions` and `/v1/completions` take. Fields a request may
//! leave out take llama.cpp's server defaults for sampling; unknown fields are ignored, as
//! OpenAI's API does; a known field of the wrong type is a 400 naming it.

use hearth_engine::sample::{GenerateParams, SamplerParams, MAX_TOP_LOGPROBS};
use hearth_engine::sched::RequestParams;
use serde::Deserialize;
use serde_json::Value;

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
    /// completions default to 16 tokens, chat to the context's end). `chat` tells which
    /// shape `logprobs` has: chat's flag with `top_logprobs` beside it, or the completions'
    /// count of alternatives.
    pub fn params(&self, default_max: Option<usize>, chat: bool) -> Result<RequestParams, Invalid> {
        let mut penalties = [0.0; 2];
        for (p, (param, v)) in penalties.iter_mut().zip([
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ]) {
            *p = v.unwrap_or(0.0);
            if !(-2.0..=2.0).contains(p) {
                return Err(invalid(
                    param,
                    format!("{param} is {p}; it must be in [-2, 2]"),
                ));
            }
        }
        let logprobs = self.logprobs(chat)?;
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
            presence_penalty: penalties[0],
            frequency_penalty: penalties[1],
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
                logprobs,
            },
            n,
        })
    }

    /// How many alternatives each token's log probability comes with, or `None` when none
    /// are asked for. Chat: `logprobs: true` and `top_logprobs` (0 to 20). Completions:
    /// `logprobs: N` (0 to 20; OpenAI allows 5, vLLM 20).
    fn logprobs(&self, chat: bool) -> Result<Option<usize>, Invalid> {
        let max = MAX_TOP_LOGPROBS;
        let top = self.top_logprobs.map(|n| n as usize);
        if top.is_some_and(|n| n > max) {
            return Err(invalid(
                "top_logprobs",
                format!("top_logprobs is {}; at most {max}", top.unwrap_or(0)),
            ));
        }
        match (&self.logprobs, chat) {
            (None | Some(Value::Null) | Some(Value::Bool(false)), _) => {
                if top.is_some_and(|n| n > 0) {
                    return Err(invalid("top_logprobs", "top_logprobs needs logprobs: true"));
                }
                Ok(None)
            }
            (Some(Value::Bool(true)), true) => Ok(Some(top.unwrap_or(0))),
            (Some(Value::Number(n)), false) => match n.as_u64() {
                Some(n) if n as usize <= max => Ok(Some(n as usize)),
                _ => Err(invalid(
                    "logprobs",
                    format!("logprobs is {n}; it must be 0 to {max}"),
                )),
            },
            (Some(v), true) => Err(invalid(
                "logprobs",
                format!("logprobs is {v}; it must be a boolean"),
            )),
            (Some(v), false) => Err(invalid(
                "logprobs",
                format!("logprobs is {v}; it must be a number of alternatives, 0 to {max}"),
            )),
        }
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage)
    }
}
