//! Forced tool calls over real vocabularies (llama.cpp's `models/ggml-vocab-*.gguf`): the
//! grammar admits a call written as the chat template taught it, token by token, and refuses
//! a call to a function not offered, arguments outside the function's schema, text around
//! the call, and a second call where only one may be made.

use hearth_engine::grammar::{Constraint, Function, GrammarSpec, ToolCalls};
use hearth_models::{GgufFile, Tokenizer, ToolCallFormat};
use serde_json::{json, Value};

fn vocab(name: &str) -> Option<Tokenizer> {
    let path = hearth_testkit::llama_cpp_vocab(name)?;
    Some(Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap())
}

fn functions() -> Vec<Function> {
    vec![
        Function {
            name: "get_weather".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"enum": ["celsius", "fahrenheit"]}
                },
                "required": ["city"]
            }),
            strict: false,
        },
        Function {
            name: "now".into(),
            parameters: Value::Null,
            strict: false,
        },
    ]
}

fn spec(format: ToolCallFormat, parallel: bool) -> GrammarSpec {
    GrammarSpec::ToolCalls(ToolCalls {
        format,
        functions: functions(),
        parallel,
    })
}

/// Whether the grammar takes `text` whole (every token allowed when drawn, and the end
/// allowed after the last).
fn admits(spec: &GrammarSpec, tokenizer: &Tokenizer, tokens: &[u32]) -> bool {
    let mut c = Constraint::new(spec, tokenizer).unwrap();
    for &t in tokens {
        if !c.allowed().is_allowed(t) {
            return false;
        }
        c.commit(t);
    }
    let end = tokenizer.end_of_generation()[0];
    c.allowed().is_allowed(end)
}

fn admits_text(spec: &GrammarSpec, tokenizer: &Tokenizer, text: &str) -> bool {
    admits(spec, tokenizer, &tokenizer.encode(text))
}

#[test]
fn hermes_calls_on_qwen2s_vocabulary() {
    let Some(tok) = vocab("qwen2") else {
        return;
    };
    let one = spec(ToolCallFormat::Hermes, false);
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    // This vocabulary (Qwen2's) predates the `<tool_call>` token: the text is spelled in
    // pieces, as any vocabulary can.
    assert!(admits(&one, &tok, &tok.encode(call)));
    assert!(admits_text(
        &one,
        &tok,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"celsius\"}}\n</tool_call>"
    ));
    assert!(admits_text(
        &one,
        &tok,
        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"
    ));
    for refused in [
        // A function not offered.
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
        // A required argument missing, a value outside its enum.
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}\n</tool_call>",
        // Text before the call, or the call left open.
        "Sure. <tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}",
    ] {
        assert!(!admits_text(&one, &tok, refused), "{refused}");
    }
    // Two calls: only where parallel calls are allowed.
    let two =
        format!("{call}\n<tool_call>\n{{\"name\": \"now\", \"arguments\": {{}}}}\n</tool_call>");
    assert!(!admits_text(&one, &tok, &two));
    assert!(admits_text(&spec(ToolCallFormat::Hermes, true), &tok, &two));
    // What the grammar admits is what the reply parser reads.
    let parsed = ToolCallFormat::Hermes.parse(&two).unwrap();
    assert_eq!(parsed.calls.len(), 2);
    assert_eq!(parsed.calls[0].1, json!({"city": "Paris"}));
}

#[test]
fn llama3_and_mistral_calls() {
    let Some(llama) = vocab("llama-bpe") else {
        return;
    };
    let spec3 = spec(ToolCallFormat::Llama3, true);
    let text = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}};{\"name\": \"now\", \"parameters\": {}}";
    assert!(admits_text(&spec3, &llama, text));
    assert_eq!(ToolCallFormat::Llama3.parse(text).unwrap().calls.len(), 2);
    assert!(!admits_text(
        &spec3,
        &llama,
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}"
    ));

    let mistral = spec(ToolCallFormat::Mistral, true);
    let text = "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}, {\"name\": \"now\", \"arguments\": {}}]";
    assert!(admits_text(&mistral, &llama, text));
    assert_eq!(ToolCallFormat::Mistral.parse(text).unwrap().calls.len(), 2);
    assert!(!admits_text(
        &mistral,
        &llama,
        "{\"name\": \"now\", \"arguments\": {}}"
    ));
}

#[test]
fn bad_parameters_are_refused_under_tool_choice() {
    let Some(tok) = vocab("qwen2") else {
        return;
    };
    let refusal = |parameters: Value, strict: bool| {
        let spec = GrammarSpec::ToolCalls(ToolCalls {
            format: ToolCallFormat::Hermes,
            functions: vec![Function {
                name: "f".into(),
                parameters,
                strict,
            }],
            parallel: false,
        });
        match Constraint::new(&spec, &tok) {
            Err(hearth_engine::Error::Options { field, reason }) => Some((field, reason)),
            Err(other) => panic!("not an options error: {other:?}"),
            Ok(_) => None,
        }
    };
    let (field, reason) = refusal(json!([1]), false).unwrap();
    assert_eq!(field, "tool_choice");
    assert!(reason.contains("function `f`"), "{reason}");
    // A keyword the compiler does not implement: an error for a strict tool only.
    let unsupported = json!({"type": "object", "not": {"required": ["a"]}});
    let (field, reason) = refusal(unsupported.clone(), true).unwrap();
    assert_eq!(field, "tool_choice");
    assert!(reason.contains("not"), "{reason}");
    assert!(refusal(unsupported, false).is_none());
}
