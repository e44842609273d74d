//! A SentencePiece Unigram model as llama.cpp's `t5` vocabulary, numbered one of two ways:
//!
//! - as SentencePiece numbers it (T5's `spiece.model`): every id up to the model's vocabulary
//!   size, a piece's text, score and kind where the model has one, `[PAD{id}]` past the
//!   pieces, and `added_tokens.json`'s tokens over both. T5's tokenizers list their 100
//!   `<extra_id_N>` sentinels only as tokenizer.json's added tokens, after the pieces:
//!   llama.cpp's converter reads neither tokenizer.json nor tokenizer_config.json for the
//!   vocabulary, so those ids are `[PAD{id}]` too;
//! - as fairseq numbers it (XLM-RoBERTa's `sentencepiece.bpe.model`): `<s>`, `<pad>`, `</s>`,
//!   `<unk>` first, then SentencePiece's pieces from its fourth on (its first three are
//!   `<unk>`, `<s>`, `</s>`), each one id later.
//!
//! Kinds are what SentencePiece's processor reports (unknown, control, unused, byte, else
//! normal), so a user-defined piece is normal here.

use serde_json::{Map, Value};

use super::sentencepiece::{self, SentencePieceModel};

/// The tokens, their scores and their GGUF kinds, and how text is normalized before them.
pub(super) struct UnigramVocab {
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub kinds: Vec<i32>,
    pub normalizer: Normalizer,
}

/// SentencePiece's normalizer settings, as GGUF's `tokenizer.ggml.*` keys hold them.
pub(super) struct Normalizer {
    /// `add_space_prefix`: a `▁` before every text.
    pub add_space_prefix: bool,
    /// `remove_extra_whitespaces`: leading, trailing and repeated spaces go.
    pub remove_extra_whitespaces: bool,
    /// `precompiled_charsmap`: the compiled normalization rules; empty for none.
    pub charsmap: Vec<u8>,
}

impl Normalizer {
    fn of(model: &SentencePieceModel) -> Self {
        Normalizer {
            add_space_prefix: model.add_dummy_prefix,
            remove_extra_whitespaces: model.remove_extra_whitespaces,
            charsmap: model.precompiled_charsmap.clone(),
        }
    }
}

/// The vocabulary `n_vocab` ids long (the pieces' count where the model gives none), with
/// `added_tokens.json`'s tokens (text to id) where the folder has that file.
pub(super) fn vocab(
    model: &SentencePieceModel,
    added: Option<&Map<String, Value>>,
    n_vocab: usize,
) -> UnigramVocab {
    let (mut tokens, mut scores, mut kinds) = model.padded(n_vocab, processor_kind);
    let n = tokens.len();
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
        normalizer: Normalizer::of(model),
    }
}

/// The vocabulary numbered as fairseq numbers it, as llama.cpp's converter realigns it: it
/// lists the pieces by SentencePiece's ids, `[PAD{id}]` past them, `n_vocab` long (the
/// model's vocabulary size, or the pieces' count where that is larger), then puts fairseq's
/// four tokens first in place of SentencePiece's three and drops the last entry. So the last
/// id, which transformers gives `<mask>`, holds `[PAD{id - 1}]` (unused): llama.cpp writes
/// `<mask>` only for nomic-bert-moe, whose model has no row for it otherwise.
pub(super) fn fairseq_vocab(model: &SentencePieceModel, n_vocab: usize) -> UnigramVocab {
    let n = n_vocab.max(model.pieces.len()).max(4);
    let mut tokens = Vec::with_capacity(n);
    let mut scores = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    for (text, kind) in [
        ("<s>", sentencepiece::CONTROL),
        ("<pad>", sentencepiece::CONTROL),
        ("</s>", sentencepiece::CONTROL),
        ("<unk>", sentencepiece::UNKNOWN),
    ] {
        tokens.push(text.to_string());
        scores.push(0.0);
        kinds.push(kind);
    }
    for id in 3..n - 1 {
        match model.pieces.get(id) {
            Some(p) => {
                tokens.push(p.text.clone());
                scores.push(p.score);
                kinds.push(processor_kind(p.kind));
            }
            None => {
                tokens.push(format!("[PAD{id}]"));
                scores.push(-10000.0);
                kinds.push(sentencepiece::UNUSED);
            }
        }
    }
    UnigramVocab {
        tokens,
        scores,
        kinds,
        normalizer: Normalizer::of(model),
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

    /// XLM-RoBERTa's numbering: fairseq's four first, the pieces past SentencePiece's three
    /// one id later, the last id padding.
    #[test]
    fn fairseq_numbering_shifts_the_pieces() {
        let piece = |text: &str, score: f32, kind: i32| Piece {
            text: text.into(),
            score,
            kind,
        };
        let model = SentencePieceModel {
            pieces: vec![
                piece("<unk>", 0.0, sentencepiece::UNKNOWN),
                piece("<s>", 0.0, sentencepiece::CONTROL),
                piece("</s>", 0.0, sentencepiece::CONTROL),
                piece("▁", -2.0, sentencepiece::NORMAL),
                piece("a", -3.0, sentencepiece::USER_DEFINED),
            ],
            model_type: ModelType::Unigram,
            add_dummy_prefix: true,
            remove_extra_whitespaces: false,
            precompiled_charsmap: vec![1, 2],
        };
        // transformers' count: the pieces, <pad> and <mask>.
        let v = fairseq_vocab(&model, 7);
        assert_eq!(
            v.tokens,
            ["<s>", "<pad>", "</s>", "<unk>", "▁", "a", "[PAD5]"]
        );
        assert_eq!(v.scores, [0.0, 0.0, 0.0, 0.0, -2.0, -3.0, -10000.0]);
        assert_eq!(v.kinds, [3, 3, 3, 2, 1, 1, 5]);
        assert!(v.normalizer.add_space_prefix && !v.normalizer.remove_extra_whitespaces);
        assert_eq!(v.normalizer.charsmap, [1, 2]);
        // A vocabulary no longer than the pieces loses the last piece, as llama.cpp's does.
        assert_eq!(
            fairseq_vocab(&model, 0).tokens,
            ["<s>", "<pad>", "</s>", "<unk>", "▁"]
        );
    }
}
