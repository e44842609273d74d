//! A SentencePiece-style BPE vocabulary read from `tokenizer.json` alone (a folder shipped
//! without `tokenizer.model`: `"byte_fallback": true`, "▁" for spaces from a `Metaspace`
//! pre-tokenizer or a `Prepend`/`Replace` normalizer), as a GGUF `llama` vocabulary.
//!
//! GGUF's SentencePiece tokenizer merges, at each step, the adjacent pair whose joined text is
//! the piece of highest score. tokenizer.json gives merges in order instead, so each piece
//! scores minus the rank of the first merge that makes it: merging by score is then merging
//! by rank, as the BPE model does. (llama.cpp's converter scores every piece -1000 here, which
//! leaves the merge order to chance.) Pieces no merge makes score below every merge.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::sentencepiece::{BYTE, CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED};
use crate::error::{Error, Result};

/// The vocabulary, with whether the normalizer puts "▁" before every text.
pub(super) struct SpmJsonVocab {
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub kinds: Vec<i32>,
    pub add_space_prefix: bool,
}

/// tokenizer.json holds a SentencePiece-style BPE: its pieces fall back to bytes.
pub(super) fn is_sentencepiece_bpe(tokenizer: &Map<String, Value>) -> bool {
    let model = tokenizer.get("model");
    let get = |k: &str| model.and_then(|m| m.get(k));
    get("type").and_then(Value::as_str) == Some("BPE")
        && get("byte_fallback").and_then(Value::as_bool) == Some(true)
}

pub(super) fn vocab(
    source: &str,
    tokenizer: &Map<String, Value>,
    added: &[(u32, String, bool)],
    n_vocab: usize,
) -> Result<SpmJsonVocab> {
    let bad = |reason: String| Error::tokenizer(source, reason);
    let model = tokenizer
        .get("model")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no `model`".into()))?;
    let add_space_prefix = space_prefix(tokenizer).map_err(bad)?;
    let (by_id, n) = super::token_ids::tokens_by_id(source, model, added, n_vocab)?;
    let ranks = merge_ranks(model).map_err(bad)?;
    let unk = model.get("unk_token").and_then(Value::as_str);
    let lowest = -(ranks.len() as f32) - 1.0;
    let mut out = SpmJsonVocab {
        tokens: Vec::with_capacity(n),
        scores: Vec::with_capacity(n),
        kinds: Vec::with_capacity(n),
        add_space_prefix,
    };
    for i in 0..n as u32 {
        let (token, score, kind) = match by_id.get(&i) {
            None => (format!("[PAD{i}]"), lowest, UNUSED),
            Some((t, Some(true))) => (t.to_string(), 0.0, CONTROL),
            Some((t, Some(false))) => (t.replace('\u{2581}', " "), 0.0, USER_DEFINED),
            Some((t, None)) if Some(*t) == unk => (t.to_string(), 0.0, UNKNOWN),
            Some((t, None)) if is_byte_piece(t) => (t.to_string(), 0.0, BYTE),
            Some((t, None)) => {
                let score = match ranks.get(*t) {
                    Some(&rank) => -(rank as f32),
                    // A single character starts every merge and is never made by one.
                    None if t.chars().count() == 1 => 0.0,
                    None => lowest,
                };
                (t.to_string(), score, NORMAL)
            }
        };
        out.tokens.push(token);
        out.scores.push(score);
        out.kinds.push(kind);
    }
    Ok(out)
}

/// `<0x0A>`: a byte the tokenizer falls back to.
fn is_byte_piece(t: &str) -> bool {
    t.len() == 6
        && t.starts_with("<0x")
        && t.ends_with('>')
        && t[3..5].chars().all(|c| c.is_ascii_hexdigit())
}

/// Each merged piece and the rank of the first merge that makes it.
fn merge_ranks(model: &Map<String, Value>) -> std::result::Result<HashMap<String, usize>, String> {
    let mut ranks = HashMap::new();
    let Some(merges) = model.get("merges").and_then(Value::as_array) else {
        return Ok(ranks);
    };
    for (rank, m) in merges.iter().enumerate() {
        let joined = match m {
            // "a b": SentencePiece pieces hold no spaces ("▁" stands for them).
            Value::String(s) => s.split_once(' ').map(|(a, b)| format!("{a}{b}")),
            Value::Array(pair) if pair.len() == 2 => pair[0]
                .as_str()
                .zip(pair[1].as_str())
                .map(|(a, b)| format!("{a}{b}")),
            _ => None,
        };
        let joined = joined.ok_or("`model.merges` holds something other than merges")?;
        ranks.entry(joined).or_insert(rank);
    }
    Ok(ranks)
}

/// Whether every text gets "▁" first: a `Prepend("▁")` normalizer, or a `Metaspace`
/// pre-tokenizer that prepends. Steps that would change the text in ways the GGUF tokenizer
/// does not are refused by name.
fn space_prefix(tokenizer: &Map<String, Value>) -> std::result::Result<bool, String> {
    let mut prefix = false;
    for step in steps(tokenizer.get("normalizer")) {
        match kind(step) {
            "Prepend" if step.get("prepend").and_then(Value::as_str) == Some("\u{2581}") => {
                prefix = true
            }
            "Replace" if replaces_spaces(step) => {}
            other => {
                return Err(format!(
                    "its normalizer has a step Hearth does not run: {other}"
                ))
            }
        }
    }
    for step in steps(tokenizer.get("pre_tokenizer")) {
        match kind(step) {
            "Metaspace" => {
                let scheme = step.get("prepend_scheme").and_then(Value::as_str);
                let legacy = step.get("add_prefix_space").and_then(Value::as_bool);
                prefix |= matches!(scheme, Some("first" | "always"))
                    || (scheme.is_none() && legacy != Some(false));
            }
            // Gemma's: split at spaces the normalizer already replaced, so a no-op.
            "Split" if step.get("pattern").and_then(|p| p.get("String")) == Some(&" ".into()) => {}
            other => {
                return Err(format!(
                    "its pre-tokenizer has a step Hearth does not run: {other}"
                ))
            }
        }
    }
    Ok(prefix)
}

/// A step, or a `Sequence`'s steps; none for null.
pub(super) fn steps(v: Option<&Value>) -> Vec<&Value> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => match kind(v) {
            "Sequence" => ["normalizers", "pretokenizers"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_array))
                .map(|list| list.iter().collect())
                .unwrap_or_default(),
            _ => vec![v],
        },
    }
}

/// A tokenizer.json step's `type`.
pub(super) fn kind(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("?")
}

/// `Replace(" " -> "▁")`.
fn replaces_spaces(step: &Value) -> bool {
    step.get("pattern").and_then(|p| p.get("String")) == Some(&" ".into())
        && step.get("content").and_then(Value::as_str) == Some("\u{2581}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tokenizer(normalizer: Value, pre: Value) -> Map<String, Value> {
        let t = json!({
            "normalizer": normalizer,
            "pre_tokenizer": pre,
            "model": {
                "type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
                "vocab": {"<unk>": 0, "<0x41>": 1, "▁": 2, "h": 3, "i": 4, "hi": 5, "▁hi": 6, "xy": 7},
                "merges": [["h", "i"], "▁ hi"],
            },
        });
        t.as_object().unwrap().clone()
    }

    #[test]
    fn merges_become_scores_by_rank() {
        let t = tokenizer(
            Value::Null,
            json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}),
        );
        assert!(is_sentencepiece_bpe(&t));
        let added = [
            (8, "<s>".to_string(), true),
            (9, "<|x|>".to_string(), false),
        ];
        let v = vocab("t", &t, &added, 11).unwrap();
        assert!(v.add_space_prefix);
        assert_eq!(
            v.kinds,
            [
                UNKNOWN,
                BYTE,
                NORMAL,
                NORMAL,
                NORMAL,
                NORMAL,
                NORMAL,
                NORMAL,
                CONTROL,
                USER_DEFINED,
                UNUSED
            ]
        );
        // "hi" is merge 0, "▁hi" merge 1; single characters 0; "xy" no merge makes.
        assert_eq!(&v.scores[2..8], &[0.0, 0.0, 0.0, -0.0, -1.0, -3.0]);
        assert_eq!(v.tokens[10], "[PAD10]");
    }

    #[test]
    fn space_prefixes_come_from_the_normalizer_or_metaspace() {
        let llama2 = json!({"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]});
        assert!(space_prefix(&tokenizer(llama2, Value::Null)).unwrap());
        let gemma = json!({"type": "Replace", "pattern": {"String": " "}, "content": "▁"});
        let split =
            json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious"});
        assert!(!space_prefix(&tokenizer(gemma, split)).unwrap());
        let never = json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"});
        assert!(!space_prefix(&tokenizer(Value::Null, never)).unwrap());
        let nfkc = json!({"type": "NFKC"});
        let err = space_prefix(&tokenizer(nfkc, Value::Null)).unwrap_err();
        assert!(err.contains("NFKC"), "{err}");
    }
}
