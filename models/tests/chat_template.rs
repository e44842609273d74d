//! Chat templates from GGUF files: SmolLM2's ChatML rendered exactly, the plain fallback for
//! files without a template, and template errors that name the file and line.

mod common;

use common::{tiny_llama, Tiny};
use hearth_models::gguf::MetaValue;
use hearth_models::{ChatMessage, ChatOptions, ChatTemplate, Error, GgufFile, Tokenizer};

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
