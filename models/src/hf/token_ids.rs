//! A `tokenizer.json` model's vocabulary by id, with its added tokens: what both of its
//! conversions (byte-level BPE, SentencePiece-style BPE) start from.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// A tokenizer.json model's tokens and its added tokens by id (`Some(special)` for an added
/// one), and how many ids the vocabulary has: `n_vocab`, or more where the tokens go past it
/// and it is 0 (unknown).
pub(super) fn tokens_by_id<'a>(
    source: &str,
    model: &'a Map<String, Value>,
    added: &'a [(u32, String, bool)],
    n_vocab: usize,
) -> Result<(TokensById<'a>, usize)> {
    let bad = |reason: String| Error::tokenizer(source, reason);
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no `model.vocab`".into()))?;
    let mut by_id: TokensById = HashMap::new();
    for (token, id) in vocab {
        if let Some(id) = id.as_u64().and_then(|i| u32::try_from(i).ok()) {
            by_id.insert(id, (token, None));
        }
    }
    for (id, token, special) in added {
        by_id.insert(*id, (token, Some(*special)));
    }
    let largest = by_id.keys().max().map_or(0, |&m| m as usize + 1);
    if n_vocab != 0 && largest > n_vocab {
        return Err(bad(format!(
            "token id {} is past the model's vocab_size {n_vocab}",
            largest - 1
        )));
    }
    Ok((by_id, n_vocab.max(largest)))
}

/// Token text by id, with `Some(special)` for added tokens.
pub(super) type TokensById<'a> = HashMap<u32, (&'a str, Option<bool>)>;
