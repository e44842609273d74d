//! Chat templates from GGUF files: SmolLM2's ChatML rendered exactly, the plain fallback for
//! files without a template, and template errors that name the file and line.

mod common;

use common::{tiny_llama, Tiny};
use hearth_models::gguf::MetaValue;
use hearth_models::{ChatMessage, ChatOptions, ChatTemplate, Error, GgufFile, Tokenizer, ToolCall};

#[test]
fn smollm2_renders_chatml_exactly() {
    let Some(path) = hearth_testkit::model(hearth_testkit::SMOLLM2) else {
        return;
    };
    let file = GgufFile::open(path).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let template = ChatTemplate::from_gguf(&file).unwrap();
    assert!(!template.is_fallback());

    let opts = ChatOptions::for_tokenizer(&tok, true);
    assert_eq!(
        (opts.bos_token.as_str(), opts.eos_token.as_str()),
        ("<|im_start|>", "<|im_end|>")
    );
    let prompt = template
        .render(&[ChatMessage::new("user", "Hi")], &opts)
        .unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );

    let conversation = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "What is 2+2?"),
        ChatMessage::new("assistant", "4."),
    ];
    let opts = ChatOptions::for_tokenizer(&tok, false);
    assert_eq!(
        template.render(&conversation, &opts).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n\
         <|im_start|>assistant\n4.<|im_end|>\n"
    );

    // The prompt tokenizes with the chat markers as single tokens.
    let ids = tok.encode(&prompt);
    assert_eq!(ids[0], 1);
    assert_eq!(ids.iter().filter(|&&id| id == 1).count(), 3);
    assert_eq!(ids.iter().filter(|&&id| id == 2).count(), 2);
}

#[test]
fn files_without_a_template_use_the_plain_format() {
    let w = tiny_llama(&Tiny::default());
    let file = GgufFile::from_bytes("tiny.gguf", w.to_bytes().unwrap()).unwrap();
    let template = ChatTemplate::from_gguf(&file).unwrap();
    assert!(template.is_fallback());
    let opts = ChatOptions {
        add_generation_prompt: true,
        ..ChatOptions::default()
    };
    let out = template
        .render(&[ChatMessage::new("user", "Hi")], &opts)
        .unwrap();
    assert_eq!(out, "User: Hi\n\nAssistant:");
}

#[test]
fn a_broken_template_names_the_file_key_and_line() {
    let mut w = tiny_llama(&Tiny::default());
    w.set_metadata(
        "tokenizer.chat_template",
        MetaValue::String("{% for m in messages %}\n{{ m.content }\n{% endfor %}".into()),
    );
    let file = GgufFile::from_bytes("tiny.gguf", w.to_bytes().unwrap()).unwrap();
    let err = ChatTemplate::from_gguf(&file).err().unwrap();
    assert!(
        matches!(err, Error::Template { line: Some(2), .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("tiny.gguf") && msg.contains("tokenizer.chat_template"),
        "{msg}"
    );
}

/// Templates rendered by Python jinja2 as Hugging Face's `apply_chat_template` renders them
/// (tests/fixtures/chat_templates.json, made by scripts/fixtures/make-chat-templates): SmolLM2's
/// own and templates in the styles of Llama 2, Gemma and others, over conversations with a
/// system turn, Unicode, quotes and out-of-order roles; and the tool-use templates of Qwen 2.5,
/// Llama 3.1, Mistral Nemo and Hermes 3 (from llama.cpp's models/templates/) with `tools`, an
/// assistant's tool call and the tool's result. Hearth's output must be the same text,
/// and where jinja2 raised, Hearth's error must carry the same message.
#[test]
fn templates_render_as_jinja2_renders_them() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/chat_templates.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 56);
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let conversation = case["conversation"].as_str().unwrap();
        let source = fixture["templates"][name].as_str().unwrap();
        let messages: Vec<ChatMessage> = fixture["conversations"][conversation]
            .as_array()
            .unwrap()
            .iter()
            .map(message)
            .collect();
        let options = ChatOptions {
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            bos_token: case["bos_token"].as_str().unwrap().into(),
            eos_token: case["eos_token"].as_str().unwrap().into(),
            tools: case.get("tools").cloned(),
        };
        let what = format!(
            "{name} over {conversation} ({})",
            case["add_generation_prompt"]
        );
        let rendered = ChatTemplate::new(source)
            .unwrap()
            .render(&messages, &options);
        match (case["output"].as_str(), case["error"].as_str()) {
            (Some(expected), None) => {
                assert_eq!(rendered.unwrap(), expected, "{what}");
            }
            (None, Some(message)) => {
                let err = rendered.expect_err(&what).to_string();
                assert!(err.contains(message), "{what}: {err}");
            }
            _ => panic!("{what}: a case holds an output or an error"),
        }
    }
}

/// A fixture's message, with its tool calls, call id and name where it has them.
fn message(m: &serde_json::Value) -> ChatMessage {
    let mut message = ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap());
    for call in m["tool_calls"].as_array().into_iter().flatten() {
        let f = &call["function"];
        message.tool_calls.push(ToolCall::function(
            call["id"].as_str().unwrap(),
            f["name"].as_str().unwrap(),
            f["arguments"].clone(),
        ));
    }
    message.tool_call_id = m["tool_call_id"].as_str().map(str::to_string);
    message.name = m["name"].as_str().map(str::to_string);
    message
}
