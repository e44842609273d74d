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

use super::answer::{Head, Kind};
use super::submit::Accepted;
use crate::logprobs;
use crate::openai::{self, Choice, ChoiceContent, Delta, ErrorBody, Usage};

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
                    content: "",
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
        if !e.text.is_empty() || !lp.is_empty() {
            let lp = head.render_logprobs(&lp, &mut self.offsets[i]);
            let piece = head.choice(i, &e.text, None, true, lp);
            out.push(json_event(&head.wrap(true, vec![piece], None)));
        }
        if let Some(f) = e.finish {
            let finish = Some(openai::finish_reason(f));
            let last = head.choice(i, "", finish, true, None);
            out.push(json_event(&head.wrap(true, vec![last], None)));
        }
        out
    }
}
