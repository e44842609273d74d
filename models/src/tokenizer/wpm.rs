//! WordPiece (`tokenizer.ggml.model = "bert"`): BERT's basic tokenization (text cleaned,
//! lowercased, accents stripped, split at whitespace and punctuation, CJK characters apart),
//! then each word split greedily into the longest pieces the vocabulary has, continuations
//! marked `##`, a word that cannot be split becoming the unknown token.
//!
//! llama.cpp's files spell the vocabulary with a phantom space: a piece that starts a word is
//! `▁word`, a continuation is bare, markup tokens (`[CLS]`) are as they are. The pieces are
//! turned back into Hugging Face's spelling and handed to the `tokenizers` crate's normalizer,
//! pre-tokenizer and model, so the ids are those of the folder's own `tokenizer.json`.

use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{Model, NormalizedString, Normalizer, OffsetReferential, OffsetType};
use tokenizers::{PreTokenizedString, PreTokenizer};

use super::spm::SPACE_MARK;
use super::TokenType;

/// The continuation marker of Hugging Face's WordPiece vocabularies.
const CONTINUATION: &str = "##";

pub(super) struct WpmModel {
    normalizer: BertNormalizer,
    model: WordPiece,
}

impl WpmModel {
    /// The model over GGUF's phantom-space `pieces`; `unk` is the unknown token's piece;
    /// `lowercase` lowercases and strips accents (uncased models, and llama.cpp's default).
    pub fn new(
        pieces: &[String],
        types: &[TokenType],
        unk: &str,
        lowercase: bool,
    ) -> Result<Self, String> {
        let vocab = pieces
            .iter()
            .zip(types)
            .enumerate()
            .map(|(i, (p, t))| (hf_spelling(p, *t), i as u32));
        let model = WordPiece::builder()
            .vocab(vocab.collect::<ahash::AHashMap<_, _>>())
            .unk_token(hf_spelling(unk, TokenType::Control))
            .continuing_subword_prefix(CONTINUATION.into())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Self {
            // Clean text, CJK characters apart, accents stripped with lowercasing.
            normalizer: BertNormalizer::new(true, true, None, lowercase),
            model,
        })
    }

    /// Appends the ids of `text` (no markup added).
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let mut normalized = NormalizedString::from(text);
        if self.normalizer.normalize(&mut normalized).is_err() {
            return;
        }
        let mut words = PreTokenizedString::from(normalized);
        if BertPreTokenizer.pre_tokenize(&mut words).is_err() {
            return;
        }
        for (word, _, _) in words.get_splits(OffsetReferential::Original, OffsetType::Char) {
            if let Ok(tokens) = self.model.tokenize(word) {
                out.extend(tokens.iter().map(|t| t.id));
            }
        }
    }
}

/// A GGUF piece as Hugging Face's vocabulary spells it.
fn hf_spelling(piece: &str, ty: TokenType) -> String {
    if ty.is_special() {
        return piece.to_string();
    }
    match piece.strip_prefix(SPACE_MARK) {
        Some(word) => word.to_string(),
        None => format!("{CONTINUATION}{piece}"),
    }
}

/// What a piece decodes to: a word start after a space, a continuation joined to what
/// precedes it.
pub(super) fn piece_bytes(piece: &str) -> Vec<u8> {
    piece.replace(SPACE_MARK, " ").into_bytes()
}
