//! What a request's responses and stream chunks share: its endpoint, id, model and time,
//! and how a choice is shaped there.

use std::sync::Arc;

use hearth_engine::sample::Logprobs;
use hearth_models::Tokenizer;

use crate::logprobs;
use crate::openai::{
    AssistantMessage, Choice, ChoiceContent, ChoiceLogprobs, Completion, Delta, ResponseToolCall,
    Usage,
};
use hearth_models::ToolCallFormat;

/// Which endpoint a response is for: the object names and where a choice's text goes.
#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Chat,
    Completion,
}

impl Kind {
    /// Tokens generated when a request gives no length: OpenAI's completions default to 16,
    /// chat to the context's end.
    pub fn default_max(self) -> Option<usize> {
        match self {
            Kind::Chat => None,
            Kind::Completion => Some(16),
        }
    }
}

/// What every chunk and response repeats.
pub struct Head {
    pub id: String,
    pub model: String,
    pub created: u64,
    pub kind: Kind,
    /// Where log probabilities were asked for: the tokenizer that spells their tokens.
    pub logprobs: Option<Arc<Tokenizer>>,
    /// Where tools were offered: the format the model writes its calls in.
    pub tools: Option<ToolCallFormat>,
}

impl Head {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    /// A response (`chunk: false`) or a stream's chunk of `choices`.
    pub fn wrap<'a>(
        &'a self,
        chunk: bool,
        choices: Vec<Choice<'a>>,
        usage: Option<Usage>,
    ) -> Completion<'a> {
        Completion {
            id: &self.id,
            object: self.object(chunk),
            created: self.created,
            model: &self.model,
            choices,
            usage,
        }
    }

    /// `logprobs` of a choice, or of a chunk of it: `None` (`null`) where none were asked
    /// for.
    pub fn render_logprobs(
        &self,
        items: &[Logprobs],
        offset: &mut usize,
    ) -> Option<ChoiceLogprobs> {
        let tokenizer = self.logprobs.as_deref()?;
        Some(match self.kind {
            Kind::Chat => ChoiceLogprobs::Chat(logprobs::chat(tokenizer, items)),
            Kind::Completion => {
                ChoiceLogprobs::Completion(logprobs::completion(tokenizer, items, offset))
            }
        })
    }

    /// One choice: a message (chat), a delta (chat chunk) or text (completion).
    pub fn choice<'a>(
        &self,
        index: usize,
        text: &'a str,
        finish: Option<&'static str>,
        chunk: bool,
        logprobs: Option<ChoiceLogprobs>,
    ) -> Choice<'a> {
        let content = match (self.kind, chunk) {
            (Kind::Chat, false) => ChoiceContent::Message(AssistantMessage {
                role: "assistant",
                content: Some(text),
                tool_calls: Vec::new(),
            }),
            (Kind::Chat, true) => ChoiceContent::Delta(Delta {
                role: None,
                content: Some(text),
                tool_calls: Vec::new(),
            }),
            (Kind::Completion, _) => ChoiceContent::Text(text),
        };
        Choice {
            index,
            content,
            logprobs,
            finish_reason: finish,
        }
    }

    /// A chat's whole answer with the tools it called: content `null` where it wrote none.
    pub fn answer_with_calls<'a>(
        &self,
        index: usize,
        content: &'a str,
        calls: Vec<ResponseToolCall>,
        logprobs: Option<ChoiceLogprobs>,
    ) -> Choice<'a> {
        Choice {
            index,
            content: ChoiceContent::Message(AssistantMessage {
                role: "assistant",
                content: (!content.is_empty()).then_some(content),
                tool_calls: calls,
            }),
            logprobs,
            finish_reason: Some("tool_calls"),
        }
    }

    /// A chat chunk holding a choice's tool calls, each with its index, whole.
    pub fn call_delta(&self, index: usize, calls: Vec<ResponseToolCall>) -> Choice<'static> {
        let calls = calls
            .into_iter()
            .enumerate()
            .map(|(k, call)| ResponseToolCall {
                index: Some(k),
                ..call
            })
            .collect();
        Choice {
            index,
            content: ChoiceContent::Delta(Delta {
                role: None,
                content: None,
                tool_calls: calls,
            }),
            logprobs: None,
            finish_reason: None,
        }
    }
}

/// The calls in a reply, parsed in `format`, with fresh ids; `None` where it holds none, or
/// only something that looked like one (it is then the answer's text).
pub fn calls_in(format: ToolCallFormat, text: &str) -> Option<(String, Vec<ResponseToolCall>)> {
    let parsed = format.parse(text).ok()?;
    if parsed.calls.is_empty() {
        return None;
    }
    let calls = parsed
        .calls
        .into_iter()
        .map(|(name, args)| ResponseToolCall::new(name, &args))
        .collect();
    Some((parsed.content, calls))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, to_value};

    use super::*;

    fn head(kind: Kind) -> Head {
        Head {
            id: "chatcmpl-1".into(),
            model: "m".into(),
            created: 7,
            kind,
            logprobs: None,
            tools: None,
        }
    }

    #[test]
    fn answers_and_chunks_have_openais_shapes() {
        let chat = head(Kind::Chat);
        let usage = Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            total_tokens: 5,
        };
        let whole = chat.choice(0, "Hi", Some("stop"), false, None);
        assert_eq!(
            to_value(chat.wrap(false, vec![whole], Some(usage))).unwrap(),
            json!({ "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
                    "choices": [{ "index": 0, "message": { "role": "assistant", "content": "Hi" },
                                  "logprobs": null, "finish_reason": "stop" }],
                    "usage": { "prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5 } })
        );
        let piece = chat.choice(1, "Hi", None, true, None);
        assert_eq!(
            to_value(chat.wrap(true, vec![piece], None)).unwrap(),
            json!({ "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7,
                    "model": "m", "choices": [{ "index": 1, "delta": { "content": "Hi" },
                                                "logprobs": null, "finish_reason": null }] })
        );
        let text = head(Kind::Completion);
        let last = text.choice(0, "", Some("length"), true, None);
        assert_eq!(
            to_value(text.wrap(true, vec![last], None)).unwrap(),
            json!({ "id": "chatcmpl-1", "object": "text_completion", "created": 7, "model": "m",
                    "choices": [{ "index": 0, "text": "", "logprobs": null,
                                  "finish_reason": "length" }] })
        );
    }
}
