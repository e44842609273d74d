//! A streamed answer as server-sent events: each token's text as a chunk (a chat's first
//! chunk per choice gives the role), a last chunk with the finish reason, the usage when
//! asked, then `[DONE]`. Dropping the stream (the client went away) drops the receiver,
//! which cancels the request.

use std::convert::Infallible;

use axum::response::sse::Event as SseEvent;
use futures_util::stream::{self, Stream, StreamExt};
use hearth_engine::sample::Logprobs;
use hearth_engine::sched::TokenEvent;
use hearth_engine::service::{Event, ServiceError};
use serde::Serialize;

use super::answer::{calls_in, Head, Kind};
use super::submit::Accepted;
use crate::logprobs;
use crate::openai::{self, Choice, ChoiceContent, Delta, ErrorBody, ResponseToolCall, Usage};
use hearth_models::ToolCallFormat;

/// Where a streamed answer stands.
struct Progress {
    head: Head,
    accepted: Accepted,
    open: usize,
    /// Per choice: whether its first chunk went out (chat's gives the role), and where its
    /// next token's text starts (completions' `text_offset`).
    started: Vec<bool>,
    offsets: Vec<usize>,
    generated: usize,
    include_usage: bool,
    done: bool,
    /// Where tools were offered, per choice: its text so far and how much of it went out.
    /// Text from where a call may begin is held back until the choice ends.
    texts: Vec<String>,
    shown: Vec<usize>,
}

pub fn stream_chunks(
    head: Head,
    accepted: Accepted,
    include_usage: bool,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let n = accepted.n;
    let state = Progress {
        head,
        accepted,
        open: n,
        started: vec![false; n],
        offsets: vec![0; n],
        generated: 0,
        include_usage,
        done: false,
        texts: vec![String::new(); n],
        shown: vec![0; n],
    };
    stream::unfold(state, move |mut s| async move {
        if s.done {
            return None;
        }
        let mut out: Vec<SseEvent> = Vec::new();
        if s.open == 0 {
            if s.include_usage {
                let usage = Usage {
                    prompt_tokens: s.accepted.prompt_tokens,
                    completion_tokens: s.generated,
                    total_tokens: s.accepted.prompt_tokens + s.generated,
                };
                out.push(json_event(&s.head.wrap(true, Vec::new(), Some(usage))));
            }
            out.push(SseEvent::default().data("[DONE]"));
            s.done = true;
            return Some((out, s));
        }
        match s.accepted.events.recv().await {
            Some(Event::Token(e)) => {
                out.extend(s.chunks_for(&e));
                s.generated += usize::from(e.token.is_some());
                if e.finish.is_some() {
                    s.open -= 1;
                }
            }
            Some(Event::Report(_)) => {}
            // The engine failed or stopped: an error event, and the stream ends.
            failed => {
                let e = match failed {
                    Some(Event::Failed(e)) => e,
                    _ => ServiceError::Stopped,
                };
                let message = e.to_string();
                out.push(json_event(&ErrorBody::new(
                    &message,
                    "server_error",
                    None,
                    None,
                )));
                s.done = true;
            }
        }
        Some((out, s))
    })
    .flat_map(|events| stream::iter(events.into_iter().map(Ok)))
}

/// One `data:` event of compact JSON.
fn json_event(value: &impl Serialize) -> SseEvent {
    // These shapes have string keys and no fallible fields: serializing them cannot fail.
    SseEvent::default().data(serde_json::to_string(value).unwrap_or_default())
}

impl Progress {
    /// The chunks one token event makes: the role first (chat), then its text and log
    /// probabilities, then the finish.
    fn chunks_for(&mut self, e: &TokenEvent) -> Vec<SseEvent> {
        let head = &self.head;
        let mut out = Vec::new();
        let i = e.sample;
        if head.kind == Kind::Chat && !self.started[i] {
            self.started[i] = true;
            let role = Choice {
                index: i,
                content: ChoiceContent::Delta(Delta {
                    role: Some("assistant"),
                    content: Some(""),
                    tool_calls: Vec::new(),
                }),
                logprobs: None,
                finish_reason: None,
            };
            out.push(json_event(&head.wrap(true, vec![role], None)));
        }
        let lp: Vec<Logprobs> = match (&e.logprobs, &head.logprobs) {
            (Some(lp), Some(t)) if logprobs::reported(t, lp) => vec![lp.clone()],
            _ => Vec::new(),
        };
        let (text, calls) = match head.tools {
            Some(format) => release(
                format,
                &mut self.texts[i],
                &mut self.shown[i],
                &e.text,
                e.finish.is_some(),
            ),
            None => (e.text.clone(), None),
        };
        if !text.is_empty() || !lp.is_empty() {
            let lp = head.render_logprobs(&lp, &mut self.offsets[i]);
            let piece = head.choice(i, &text, None, true, lp);
            out.push(json_event(&head.wrap(true, vec![piece], None)));
        }
        let called = calls.is_some();
        if let Some(calls) = calls {
            out.push(json_event(&head.wrap(
                true,
                vec![head.call_delta(i, calls)],
                None,
            )));
        }
        if let Some(f) = e.finish {
            let finish = Some(if called {
                "tool_calls"
            } else {
                openai::finish_reason(f)
            });
            let last = head.choice(i, "", finish, true, None);
            out.push(json_event(&head.wrap(true, vec![last], None)));
        }
        out
    }
}

/// The text of a choice that may go out now that `piece` came, and at its end the
/// calls it made: text before where a call may begin goes at once; the rest waits for
/// the end, and is then either calls or, if it was not one after all, text.
fn release(
    format: ToolCallFormat,
    text: &mut String,
    shown: &mut usize,
    piece: &str,
    end: bool,
) -> (String, Option<Vec<ResponseToolCall>>) {
    text.push_str(piece);
    let from = *shown;
    if end {
        *shown = text.len();
        return match calls_in(format, text) {
            Some((_, calls)) => {
                let before = format.call_start(text).unwrap_or(text.len()).max(from);
                (text[from..before].to_string(), Some(calls))
            }
            None => (text[from..].to_string(), None),
        };
    }
    let upto = format.call_start(text).unwrap_or(text.len()).max(from);
    *shown = upto;
    (text[from..upto].to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text goes out until a call may begin; the call comes whole at the end. A reply that
    /// only looked like a call goes out as text at the end.
    #[test]
    fn calls_are_held_back_and_text_is_not() {
        let format = ToolCallFormat::Hermes;
        let (mut text, mut shown) = (String::new(), 0);
        let mut feed = |piece: &str, end: bool| release(format, &mut text, &mut shown, piece, end);
        assert_eq!(feed("Checking", false), ("Checking".to_string(), None));
        assert_eq!(feed(" now. <tool", false).0, " now. ");
        assert_eq!(feed("_call>\n{\"name\": \"f\", ", false).0, "");
        let (rest, calls) = feed("\"arguments\": {\"x\": 1}}\n</tool_call>", true);
        assert_eq!(rest, "");
        let calls = calls.expect("the call");
        assert_eq!(
            (
                calls[0].function.name.as_str(),
                calls[0].function.arguments.as_str()
            ),
            ("f", r#"{"x":1}"#)
        );

        let (mut text, mut shown) = (String::new(), 0);
        let mut feed = |piece: &str, end: bool| release(format, &mut text, &mut shown, piece, end);
        assert_eq!(feed("a <", false).0, "a ");
        assert_eq!(feed("b", true), ("<b".to_string(), None));
    }
}
