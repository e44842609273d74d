//! Hugging Face tokenizer.json files through the wrapper: all-MiniLM-L6-v2's WordPiece
//! against ids recorded with Python `tokenizers`.

mod common;

use hearth_models::HfTokenizer;

const FIXTURE: &str = include_str!("fixtures/minilm_tokens.json");

#[test]
fn minilm_wordpiece_matches_the_reference() {
    let Some(dir) = hearth_testkit::model(hearth_testkit::MINILM) else {
        return;
    };
    // A model directory and its tokenizer.json load the same tokenizer.
    let tok = HfTokenizer::from_file(&dir).unwrap();
    let direct = HfTokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    assert_eq!(tok.vocab_size(), direct.vocab_size());
    assert_eq!(tok.vocab_size(), 30522);
    assert_eq!(tok.token_id("[CLS]"), Some(101));

    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let enc = tok.encode(text, true).unwrap();
        let numbers = |key: &str| -> Vec<u32> {
            let values = case[key].as_array().unwrap();
            values.iter().map(|v| v.as_u64().unwrap() as u32).collect()
        };
        assert_eq!(enc.ids, numbers("ids"), "{text:?}");
        assert_eq!(enc.attention_mask, numbers("attention_mask"), "{text:?}");
        let tokens: Vec<&str> = case["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(enc.tokens, tokens, "{text:?}");
        assert_eq!(enc.ids.first(), Some(&101));
    }
    let enc = tok.encode("Hello world!", true).unwrap();
    assert_eq!(tok.decode(&enc.ids, true).unwrap(), "hello world!");
}

#[test]
fn missing_or_broken_tokenizer_json_names_the_file() {
    let dir = common::scratch_dir("hf-broken");
    let err = HfTokenizer::from_file(&dir).err().unwrap().to_string();
    assert!(err.contains("tokenizer.json"), "{err}");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, "{ not json").unwrap();
    let err = HfTokenizer::from_file(&path).err().unwrap().to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("tokenizer"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The folder converted to GGUF (`bert`, phantom-space pieces) tokenizes as Python
/// `tokenizers` does with the folder's own tokenizer.json: [CLS] ... [SEP], lowercased,
/// accents stripped, punctuation apart, continuations found.
#[test]
fn minilm_converted_to_gguf_tokenizes_as_its_tokenizer_json() {
    let Some(dir) = hearth_testkit::model(hearth_testkit::MINILM) else {
        return;
    };
    let file = hearth_models::open_model(&dir).unwrap();
    let tok = hearth_models::Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(
        tok.kind(),
        hearth_models::tokenizer::TokenizerKind::WordPiece
    );
    assert_eq!(tok.vocab_size(), 30522);
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).unwrap();
    for case in fixture["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        // The fixture pads to a fixed length; the mask marks the text's tokens.
        let mask = case["attention_mask"].as_array().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .zip(mask)
            .filter(|(_, m)| m.as_u64() == Some(1))
            .map(|(v, _)| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(text), want, "{text:?}");
    }
}
