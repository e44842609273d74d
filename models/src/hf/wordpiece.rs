//! A `tokenizer.json` WordPiece model (BERT's) as llama.cpp's `bert` vocabulary: every token
//! by id, spelled with a phantom space (a word's first piece `▁word`, a continuation `##ing`
//! bare), markup tokens as they are.

use serde_json::{Map, Value};

use super::sentencepiece;
use super::token_ids::tokens_by_id;
use crate::error::{Error, Result};

/// The tokens and their GGUF kinds.
pub(super) struct WordPieceVocab {
    pub tokens: Vec<String>,
    pub kinds: Vec<i32>,
    /// Whether the normalizer lowercases (an uncased model).
    pub lowercase: bool,
}

/// Whether tokenizer.json's model is WordPiece.
pub(super) fn is_wordpiece(tokenizer: &Map<String, Value>) -> bool {
    let model = tokenizer.get("model").and_then(Value::as_object);
    model.and_then(|m| m.get("type")).and_then(Value::as_str) == Some("WordPiece")
}

pub(super) fn vocab(
    source: &str,
    tokenizer: &Map<String, Value>,
    added: &[(u32, String, bool)],
    n_vocab: usize,
) -> Result<WordPieceVocab> {
    let model = tokenizer
        .get("model")
        .and_then(Value::as_object)
        .ok_or_else(|| Error::tokenizer(source, "no `model`"))?;
    let prefix = model
        .get("continuing_subword_prefix")
        .and_then(Value::as_str)
        .unwrap_or("##");
    let (by_id, n) = tokens_by_id(source, model, added, n_vocab)?;
    let mut tokens = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    for i in 0..n as u32 {
        let (token, kind) = match by_id.get(&i) {
            None => (format!("[PAD{i}]"), sentencepiece::UNUSED),
            Some((t, Some(true))) => (t.to_string(), sentencepiece::CONTROL),
            Some((t, _)) => match t.strip_prefix(prefix) {
                Some(rest) => (rest.to_string(), sentencepiece::NORMAL),
                None => (format!("\u{2581}{t}"), sentencepiece::NORMAL),
            },
        };
        tokens.push(token);
        kinds.push(kind);
    }
    let normalizer = tokenizer.get("normalizer").and_then(Value::as_object);
    let lowercase = normalizer
        .and_then(|n| n.get("lowercase"))
        .and_then(Value::as_bool)
        .unwrap_or(true);
    Ok(WordPieceVocab {
        tokens,
        kinds,
        lowercase,
    })
}
