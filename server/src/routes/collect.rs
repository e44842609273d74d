//! A whole answer: every completion's text gathered, then one response with the usage.

use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::sample::Logprobs;
use hearth_engine::service::{Event, ServiceError};

use super::answer::{calls_in, Head};
use super::error::ApiError;
use super::submit::Accepted;
use crate::logprobs;
use crate::openai::{self, Usage};

pub async fn collect(head: Head, mut accepted: Accepted) -> Result<Response, ApiError> {
    let n = accepted.n;
    let mut texts = vec![String::new(); n];
    let mut logprobs: Vec<Vec<Logprobs>> = vec![Vec::new(); n];
    let mut finish: Vec<Option<&'static str>> = vec![None; n];
    let mut generated = 0;
    while finish.iter().any(Option::is_none) {
        match accepted.events.recv().await {
            Some(Event::Token(e)) => {
                generated += usize::from(e.token.is_some());
                texts[e.sample].push_str(&e.text);
                if let (Some(lp), Some(tokenizer)) = (e.logprobs, &head.logprobs) {
                    if logprobs::reported(tokenizer, &lp) {
                        logprobs[e.sample].push(lp);
                    }
                }
                if let Some(f) = e.finish {
                    finish[e.sample] = Some(openai::finish_reason(f));
                }
            }
            Some(Event::Report(_)) => {}
            Some(Event::Failed(e)) => return Err(e.into()),
            None => return Err(ServiceError::Stopped.into()),
        }
    }
    let replies: Vec<Option<(String, Vec<_>)>> = texts
        .iter()
        .map(|text| head.tools.and_then(|format| calls_in(format, text)))
        .collect();
    let choices = (0..n)
        .map(|i| {
            let lp = head.render_logprobs(&logprobs[i], &mut 0);
            match &replies[i] {
                Some((content, calls)) => head.answer_with_calls(i, content, calls.clone(), lp),
                None => head.choice(i, &texts[i], finish[i], false, lp),
            }
        })
        .collect();
    let usage = Usage {
        prompt_tokens: accepted.prompt_tokens,
        completion_tokens: generated,
        total_tokens: accepted.prompt_tokens + generated,
    };
    Ok(Json(head.wrap(false, choices, Some(usage))).into_response())
}
