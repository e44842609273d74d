//! Hearth's tokenizers against llama.cpp's own test cases: each `models/ggml-vocab-NAME.gguf`
//! of llama.cpp's source comes with texts (`.inp`, separated by `__ggml_vocab_test__` lines)
//! and the ids its tokenizer gives them (`.out`, one line per text), which llama.cpp's tests
//! check against Hugging Face `tokenizers`.

use hearth_models::{EncodeOptions, GgufFile, Tokenizer};

const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

fn check_vocab(name: &str) {
    let Some(path) = hearth_testkit::llama_cpp_vocab(name) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let read = |ext: &str| std::fs::read_to_string(path.with_extension(ext)).unwrap();
    let inputs = read("gguf.inp");
    let outputs = read("gguf.out");
    // Each text is followed by the separator, the last one too.
    let texts: Vec<&str> = inputs
        .strip_suffix(SEPARATOR)
        .unwrap_or(&inputs)
        .split(SEPARATOR)
        .collect();
    let expected: Vec<&str> = outputs.lines().collect();
    assert_eq!(texts.len(), expected.len(), "{name}: cases");
    let opts = EncodeOptions {
        add_special: false,
        parse_special: false,
    };
    let mut wrong = Vec::new();
    for (text, want) in texts.iter().zip(&expected) {
        let want: Vec<u32> = want
            .split_whitespace()
            .map(|id| id.parse().unwrap())
            .collect();
        let got = tokenizer.encode_with(text, opts);
        if got != want {
            wrong.push(format!("{text:?}: got {got:?}, want {want:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{name}: {} of {} cases differ:\n{}",
        wrong.len(),
        texts.len(),
        wrong.join("\n")
    );
}

#[test]
fn llama3_bpe() {
    check_vocab("llama-bpe");
}

#[test]
fn qwen2() {
    check_vocab("qwen2");
}

#[test]
fn llama_spm() {
    check_vocab("llama-spm");
}

#[test]
fn phi3() {
    check_vocab("phi-3");
}

#[test]
fn gpt2() {
    check_vocab("gpt-2");
}

#[test]
fn gemma4() {
    check_vocab("gemma-4");
}
