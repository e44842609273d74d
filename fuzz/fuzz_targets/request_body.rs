//! Arbitrary bytes as the body of `/v1/chat/completions` or `/v1/completions` (the first byte
//! picks which): reading it must return a refusal naming a field, or a request whose every
//! derived setting (sampling, length, stops, grammar, tools, drafting) is read or refused by
//! name in turn; never a panic.
#![no_main]

use hearth_server::openai::{ChatRequest, CompletionRequest, Sampling};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn derived(sampling: &Sampling, chat: bool, prompts: usize) {
    let _ = sampling.params(Some(16), chat, prompts);
    let _ = sampling.speculative(None);
    let _ = sampling.grammar();
    if let Ok(tools) = sampling.tool_request() {
        let _ = tools.offered();
        let _ = tools.forced(hearth_models::ToolCallFormat::Hermes);
    }
    let _ = (sampling.stream(), sampling.include_usage());
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    if kind % 2 == 0 {
        if let Ok(request) = ChatRequest::from_json(&body) {
            assert!(!request.messages.is_empty());
            derived(&request.sampling, true, 1);
        }
    } else if let Ok(request) = CompletionRequest::from_json(&body) {
        derived(&request.sampling, false, request.prompt.0.len());
    }
});
