//! A SentencePiece Unigram model (T5's `spiece.model`) as llama.cpp's `t5` vocabulary: every
//! id up to the model's vocabulary size, a piece's text, score and kind where the model has
//! one, `[PAD{id}]` past the pieces, and `added_tokens.json`'s tokens over both.
//!
//! Kinds are what SentencePiece's processor reports (unknown, control, unused, byte, else
//! normal), so a user-defined piece is normal here. T5's tokenizers list their 100
//! `<extra_id_N>` sentinels only as tokenizer.json's added tokens, after the pieces: llama.cpp's
//! converter reads neither tokenizer.json nor tokenizer_config.json for the vocabulary, so those
//! ids are `[PAD{id}]` too.

use serde_json::{Map, Value};

use super::sentencepiece::{self, SentencePieceModel};

/// The tokens, their scores and their GGUF kinds.
pub(super) struct UnigramVocab {
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub kinds: Vec<i32>,
}

/// The vocabulary `n_vocab` ids long (the pieces' count where the model gives none), with
/// `added_tokens.json`'s tokens (text to id) where the folder has that file.
pub(super) fn vocab(
    model: &SentencePieceModel,
    added: Option<&Map<String, Value>>,
    n_vocab: usize,
) -> UnigramVocab {
    let n = if n_vocab == 0 {
        model.pieces.len()
    } else {
        n_vocab
    };
    let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; n];
    let mut kinds = vec![sentencepiece::UNUSED; n];
    for (i, p) in model.pieces.iter().take(n).enumerate() {
        tokens[i] = p.text.clone();
        scores[i] = p.score;
        kinds[i] = processor_kind(p.kind);
    }
    for (text, id) in added.into_iter().flatten() {
        match id.as_u64().map(|id| id as usize) {
            Some(id) if id < n => {
                tokens[id] = text.clone();
                scores[id] = -1000.0;
                kinds[id] = sentencepiece::USER_DEFINED;
            }
            _ => {}
        }
    }
    UnigramVocab {
        tokens,
        scores,
        kinds,
    }
}

/// A piece's kind as SentencePiece's processor asks it (`IsUnknown`, `IsControl`, `IsUnused`,
/// `IsByte`): a user-defined piece answers none of them.
fn processor_kind(kind: i32) -> i32 {
    match kind {
        sentencepiece::UNKNOWN
        | sentencepiece::CONTROL
        | sentencepiece::UNUSED
        | sentencepiece::BYTE => kind,
        _ => sentencepiece::NORMAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf::sentencepiece::{ModelType, Piece};

    #[test]
    fn pieces_then_padding_then_added_tokens() {
        let piece = |text: &str, score: f32, kind: i32| Piece {
            text: text.into(),
            score,
            kind,
        };
        let model = SentencePieceModel {
            pieces: vec![
                piece("<pad>", 0.0, sentencepiece::CONTROL),
                piece("</s>", 0.0, sentencepiece::CONTROL),
                piece("<unk>", 0.0, sentencepiece::UNKNOWN),
                piece("<sep>", 0.0, sentencepiece::USER_DEFINED),
                piece("▁a", -2.5, sentencepiece::NORMAL),
            ],
            model_type: ModelType::Unigram,
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            precompiled_charsmap: Vec::new(),
        };
        let added: Map<String, Value> =
            serde_json::from_str(r#"{"<extra_id_0>": 6, "<far>": 99}"#).unwrap();
        let v = vocab(&model, Some(&added), 8);
        assert_eq!(
            v.tokens,
            [
                "<pad>",
                "</s>",
                "<unk>",
                "<sep>",
                "▁a",
                "[PAD5]",
                "<extra_id_0>",
                "[PAD7]"
            ]
        );
        assert_eq!(
            v.scores,
            [0.0, 0.0, 0.0, 0.0, -2.5, -10000.0, -1000.0, -10000.0]
        );
        assert_eq!(v.kinds, [3, 3, 2, 1, 1, 5, 4, 5]);
        // No vocabulary size: the pieces'.
        assert_eq!(vocab(&model, None, 0).tokens.len(), 5);
    }
}
