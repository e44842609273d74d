//! A SentencePiece Unigram vocabulary read from `tokenizer.json` alone (an XLM-RoBERTa folder
//! shipped without `sentencepiece.bpe.model`), as llama.cpp's converter reads it into a `t5`
//! vocabulary: the model's pieces and scores by id (already numbered as the model numbers
//! them: no realignment), the unknown token, control tokens for the special ones and
//! user-defined ones for the other added tokens, `[PAD{id}]` up to the model's vocabulary
//! size; the normalizer's compiled character map, and whether a space goes first.
//!
//! Whether runs of spaces collapse is read from the tokenizer's own steps (a `WhitespaceSplit`
//! pre-tokenizer, as transformers 5 writes, or a normalizer that replaces runs of spaces, as
//! transformers 4's converter wrote), so that the file tokenizes as the folder's tokenizer
//! does. llama.cpp's converter takes it from `clean_up_tokenization_spaces` instead, a
//! decoding option that transformers 5 leaves false where tokenizer_config.json omits it.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::sentencepiece::{CONTROL, NORMAL, UNKNOWN, UNUSED, USER_DEFINED};
use super::spm_json::{kind, steps};
use super::unigram::{Normalizer, UnigramVocab};
use crate::error::{Error, Result};

/// tokenizer.json holds a Unigram model.
pub(super) fn is_unigram(tokenizer: &Map<String, Value>) -> bool {
    let model = tokenizer.get("model");
    model.and_then(|m| m.get("type")).and_then(Value::as_str) == Some("Unigram")
}

/// The vocabulary `n_vocab` ids long (the model's pieces' count where that is larger).
/// `specials`: the texts tokenizer_config.json names as special tokens (`bos_token` and the
/// like); `added`: tokenizer.json's added tokens (id, content, special).
pub(super) fn vocab(
    source: &str,
    tokenizer: &Map<String, Value>,
    tokenizer_config: Option<&Map<String, Value>>,
    specials: &[String],
    added: &[(u32, String, bool)],
    n_vocab: usize,
) -> Result<UnigramVocab> {
    let bad = |reason: String| Error::tokenizer(source, reason);
    let model = tokenizer
        .get("model")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no `model`".into()))?;
    let pieces = model
        .get("vocab")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `model.vocab` list".into()))?;
    let pieces: Vec<(&str, f32)> = pieces
        .iter()
        .map(|p| {
            let pair = p.as_array().filter(|a| a.len() == 2)?;
            Some((pair[0].as_str()?, pair[1].as_f64()? as f32))
        })
        .collect::<Option<_>>()
        .ok_or_else(|| bad("`model.vocab` holds something other than [piece, score]".into()))?;
    // The unknown token: the one tokenizer_config.json names, where it is an added token,
    // else the model's `unk_id` (llama.cpp's default: 3, XLM-RoBERTa's).
    let named_unk = tokenizer_config
        .and_then(|c| c.get("unk_token"))
        .and_then(Value::as_str)
        .and_then(|unk| added.iter().find(|(_, t, _)| t == unk))
        .map(|(id, ..)| *id as usize);
    let unk = named_unk.or_else(|| {
        let id = model.get("unk_id").and_then(Value::as_u64);
        Some(id.map_or(3, |id| id as usize))
    });

    let n = n_vocab.max(pieces.len());
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n];
    let mut kinds = vec![UNUSED; n];
    for (id, &(piece, score)) in pieces.iter().enumerate() {
        // An added token's id spells its content, as transformers' `convert_ids_to_tokens`.
        let addition = added.iter().find(|(a, ..)| *a as usize == id);
        let text = addition.map_or(piece, |(_, t, _)| t.as_str());
        tokens[id] = text.to_string();
        scores[id] = score;
        kinds[id] = if Some(id) == unk {
            UNKNOWN
        } else if addition.is_some_and(|(_, _, special)| *special)
            || specials.iter().any(|s| s == text)
        {
            CONTROL
        } else if addition.is_some() {
            USER_DEFINED
        } else {
            NORMAL
        };
    }
    let normalizer = normalizer(tokenizer, tokenizer_config).map_err(bad)?;
    Ok(UnigramVocab {
        tokens,
        scores,
        kinds,
        normalizer,
    })
}

/// The normalizer's settings from the tokenizer's steps; a step that would change the text in
/// a way SentencePiece's normalizer does not is refused by name.
fn normalizer(
    tokenizer: &Map<String, Value>,
    tokenizer_config: Option<&Map<String, Value>>,
) -> std::result::Result<Normalizer, String> {
    let mut charsmap = Vec::new();
    let mut collapses = false;
    for step in steps(tokenizer.get("normalizer")) {
        match kind(step) {
            "Precompiled" => {
                let text = step
                    .get("precompiled_charsmap")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                charsmap = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| format!("its precompiled_charsmap is not base64: {e}"))?;
            }
            // transformers 4's SentencePiece converter: trailing spaces go, runs become one.
            "Strip" => {}
            "Replace" if replaces_runs_of_spaces(step) => collapses = true,
            other => {
                return Err(format!(
                    "its normalizer has a step Hearth does not run: {other}"
                ))
            }
        }
    }
    let mut metaspace_prefix = None;
    for step in steps(tokenizer.get("pre_tokenizer")) {
        match kind(step) {
            "WhitespaceSplit" => collapses = true,
            "Metaspace" => {
                let scheme = step.get("prepend_scheme").and_then(Value::as_str);
                let legacy = step.get("add_prefix_space").and_then(Value::as_bool);
                metaspace_prefix = Some(match scheme {
                    Some(scheme) => scheme != "never",
                    None => legacy != Some(false),
                });
            }
            other => {
                return Err(format!(
                    "its pre-tokenizer has a step Hearth does not run: {other}"
                ))
            }
        }
    }
    // llama.cpp's converter asks transformers' tokenizer, which takes tokenizer_config.json's
    // `add_prefix_space` (true by default).
    let configured = tokenizer_config
        .and_then(|c| c.get("add_prefix_space"))
        .and_then(Value::as_bool);
    Ok(Normalizer {
        add_space_prefix: configured.or(metaspace_prefix).unwrap_or(true),
        remove_extra_whitespaces: collapses,
        charsmap,
    })
}

/// `Replace(/ {2,}/ -> "▁")`: runs of spaces become one.
fn replaces_runs_of_spaces(step: &Value) -> bool {
    step.get("pattern").and_then(|p| p.get("Regex")) == Some(&" {2,}".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// XLM-RoBERTa's tokenizer.json as transformers 5 writes it: fairseq's numbering already,
    /// the specials as added tokens, `<mask>` last.
    #[test]
    fn pieces_specials_and_the_normalizer() {
        let t = object(json!({
            "added_tokens": [],
            "normalizer": {"type": "Precompiled", "precompiled_charsmap": "AQID"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"},
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}]},
            "model": {"type": "Unigram", "unk_id": 3, "vocab": [
                ["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["▁", -2.5],
                ["<x>", -3.0], ["<mask>", 0.0]]},
        }));
        assert!(is_unigram(&t));
        let added: Vec<(u32, String, bool)> = [(0, "<s>"), (1, "<pad>"), (2, "</s>"), (3, "<unk>")]
            .iter()
            .map(|&(id, text)| (id, text.to_string(), true))
            .chain([(5, "<x>".to_string(), false)])
            .collect();
        let config = object(json!({"unk_token": "<unk>", "mask_token": "<mask>"}));
        let specials = vec!["<mask>".to_string()];
        let v = vocab("t", &t, Some(&config), &specials, &added, 8).unwrap();
        assert_eq!(
            v.tokens,
            ["<s>", "<pad>", "</s>", "<unk>", "▁", "<x>", "<mask>", "[PAD7]"]
        );
        assert_eq!(
            v.kinds,
            [
                CONTROL,
                CONTROL,
                CONTROL,
                UNKNOWN,
                NORMAL,
                USER_DEFINED,
                CONTROL,
                UNUSED
            ]
        );
        assert_eq!(v.scores[4], -2.5);
        assert_eq!(v.scores[7], -10000.0);
        assert_eq!(v.normalizer.charsmap, [1, 2, 3]);
        assert!(v.normalizer.add_space_prefix && v.normalizer.remove_extra_whitespaces);
    }

    #[test]
    fn spaces_follow_the_tokenizers_steps() {
        let with = |normalizer: Value, pre: Value, config: Value| {
            let t = object(json!({"normalizer": normalizer, "pre_tokenizer": pre}));
            normalizer_of(&t, &object(config))
        };
        fn normalizer_of(
            t: &Map<String, Value>,
            c: &Map<String, Value>,
        ) -> std::result::Result<(bool, bool), String> {
            normalizer(t, Some(c)).map(|n| (n.add_space_prefix, n.remove_extra_whitespaces))
        }
        // An old hub file: a bare Metaspace keeps runs of spaces.
        let metaspace = json!({"type": "Metaspace", "replacement": "▁", "add_prefix_space": true});
        assert_eq!(
            with(Value::Null, metaspace.clone(), json!({})),
            Ok((true, false))
        );
        // transformers 4's converter: runs replaced by one "▁"; no prefix where configured so.
        let runs = json!({"type": "Sequence", "normalizers": [
            {"type": "Strip", "left": false, "right": true},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]});
        assert_eq!(
            with(runs, metaspace.clone(), json!({"add_prefix_space": false})),
            Ok((false, true))
        );
        let err = with(json!({"type": "Lowercase"}), metaspace, json!({})).unwrap_err();
        assert!(err.contains("Lowercase"), "{err}");
        let err = with(Value::Null, json!({"type": "BertPreTokenizer"}), json!({})).unwrap_err();
        assert!(err.contains("BertPreTokenizer"), "{err}");
    }
}
