//! Arbitrary bytes as a chat template (what a GGUF file's `tokenizer.chat_template` or a
//! folder's `tokenizer_config.json` carries): compiling must return an error with a line, and
//! rendering a conversation with tools, calls and results must end with text or an error;
//! the template's fuel, recursion limit and output cap bound what it may do.
#![no_main]

use hearth_models::{ChatMessage, ChatOptions, ChatTemplate, ToolCall};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    // Rendering turns a panic inside the template engine into the template's error, as it
    // must in a server; libFuzzer's hook would abort on it first. Uncaught panics still end
    // the run (the harness aborts on them), now with Rust's own report.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| drop(std::panic::take_hook()));
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(template) = ChatTemplate::new(source) else {
        return;
    };
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls = vec![ToolCall::function(
        "call_1",
        "get_weather",
        json!({"city": "Paris"}),
    )];
    let mut result = ChatMessage::new("tool", "{\"temperature\": 21}");
    result.tool_call_id = Some("call_1".into());
    let messages = [
        ChatMessage::new("system", "You are helpful."),
        ChatMessage::new("user", "Weather in Paris? <|im_end|>{{ x }}"),
        call,
        result,
        ChatMessage::new("assistant", "It is 21 degrees."),
        ChatMessage::new("user", "Thanks"),
    ];
    let options = ChatOptions {
        add_generation_prompt: true,
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
        tools: Some(
            json!([{ "type": "function", "function": { "name": "get_weather",
            "parameters": { "type": "object", "properties": { "city": { "type": "string" } } } } }]),
        ),
        ..ChatOptions::default()
    };
    let _ = template.render(&messages, &options);
    let _ = template.render(&messages[..2], &ChatOptions::default());
});
