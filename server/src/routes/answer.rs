//! What a request's responses and stream chunks share: its endpoint, id, model and time,
//! and how a choice is shaped there.

use std::sync::Arc;

use hearth_engine::sample::Logprobs;
use hearth_models::Tokenizer;

use crate::logprobs;
use crate::openai::{
    AssistantMessage, Choice, ChoiceContent, ChoiceLogprobs, Completion, Delta, Usage,
};

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
                content: text,
            }),
            (Kind::Chat, true) => ChoiceContent::Delta(Delta {
                role: None,
                content: text,
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
