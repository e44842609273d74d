//! SentencePiece Unigram (`tokenizer.ggml.model = "t5"`: T5, Flan-T5, mT5, and llama.cpp's
//! XLM-RoBERTa conversions). Text is normalized as SentencePiece normalizes it: the
//! precompiled charsmap's longest match replaces each position, runs of spaces collapse and the
//! ends are trimmed where the file says so (`remove_extra_whitespaces`), spaces become `▁`, and
//! a `▁` goes first (`add_space_prefix`). The `tokenizers` crate's Unigram model then picks the
//! segmentation of highest total score over the whole text (Viterbi). A run of characters no
//! piece covers becomes one unknown token, or its UTF-8 bytes as `<0xXX>` tokens where the
//! vocabulary has them (byte fallback).
//!
//! Only normal pieces take part, as in SentencePiece: control and unknown tokens are not
//! matched in text, nor are byte tokens or unused ones (the `[PAD{i}]` entries llama.cpp's
//! converter pads T5's vocabulary with); user-defined tokens are matched before this model, as
//! for every kind. The unknown token's score is the lowest normal score less 10.

use tokenizers::models::unigram::Unigram;
use tokenizers::Model;

use super::charsmap::Charsmap;
use super::spm::SPACE_MARK;
use super::{parse_byte_token, TokenType};

pub(super) struct UgmModel {
    /// The normalizer's map; none where the file has none (text is kept as it is).
    charsmap: Option<Charsmap>,
    model: Unigram,
    unk: u32,
    /// The `<0xXX>` token of each byte, where the vocabulary has byte tokens.
    byte_ids: Option<Box<[Option<u32>; 256]>>,
    remove_extra_whitespaces: bool,
}

impl UgmModel {
    /// The model over `pieces` and their `scores` (one each); `unk` is the unknown token's id.
    pub fn new(
        pieces: &[String],
        types: &[TokenType],
        scores: &[f32],
        unk: u32,
        charsmap: Option<Charsmap>,
        remove_extra_whitespaces: bool,
    ) -> Result<Self, String> {
        let normal = |i: usize| types[i] == TokenType::Normal;
        let min_score = (0..pieces.len())
            .filter(|&i| normal(i))
            .map(|i| scores[i])
            .fold(f32::INFINITY, f32::min);
        let min_score = if min_score.is_finite() {
            min_score
        } else {
            0.0
        };
        // The Unigram model matches every entry of its vocabulary and scores an unknown
        // character below the lowest entry. Other tokens keep their ids under a name with a
        // space, which normalized text never holds, and the lowest normal score.
        let vocab = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| match normal(i) {
                true => (p.clone(), f64::from(scores[i])),
                false => (format!(" {i}"), f64::from(min_score)),
            })
            .collect();
        let model = Unigram::from(vocab, Some(unk as usize), false).map_err(|e| e.to_string())?;

        let mut byte_ids = [None; 256];
        let mut any_bytes = false;
        for (i, (p, &t)) in pieces.iter().zip(types).enumerate() {
            if let (TokenType::Byte, Some(b)) = (t, parse_byte_token(p)) {
                byte_ids[b as usize] = Some(i as u32);
                any_bytes = true;
            }
        }
        Ok(Self {
            charsmap,
            model,
            unk,
            byte_ids: any_bytes.then(|| Box::new(byte_ids)),
            remove_extra_whitespaces,
        })
    }

    /// Appends the ids of `text` (no markup added); `space_prefix` puts a `▁` first.
    pub fn encode(&self, text: &str, space_prefix: bool, out: &mut Vec<u32>) {
        let normalized = self.normalize(text, space_prefix);
        if normalized.is_empty() {
            return;
        }
        // Fails only without an unknown token, which `new` requires.
        let Ok(tokens) = self.model.tokenize(&normalized) else {
            return;
        };
        for token in tokens {
            match &self.byte_ids {
                Some(byte_ids) if token.id == self.unk => out.extend(
                    token
                        .value
                        .bytes()
                        .map(|b| byte_ids[b as usize].unwrap_or(self.unk)),
                ),
                _ => out.push(token.id),
            }
        }
    }

    /// SentencePiece's normalizer (`Normalizer::Normalize`): each position's longest charsmap
    /// match replaced; with `remove_extra_whitespaces`, spaces at the start dropped, each run
    /// of them kept as one, `▁`s at the end dropped; spaces as `▁`.
    fn normalize(&self, text: &str, space_prefix: bool) -> String {
        let collapse = self.remove_extra_whitespaces;
        let mut out = String::with_capacity(text.len() + 3);
        let mut rest = text;
        if collapse {
            while let Some((" ", len)) = self.next_piece(rest) {
                rest = &rest[len..];
            }
        }
        if rest.is_empty() {
            return out;
        }
        if space_prefix {
            out.push(SPACE_MARK);
        }
        let mut after_space = collapse;
        while let Some((mut piece, len)) = self.next_piece(rest) {
            if after_space {
                piece = piece.trim_start_matches(' ');
            }
            if !piece.is_empty() {
                out.extend(piece.chars().map(|c| if c == ' ' { SPACE_MARK } else { c }));
                after_space = collapse && piece.ends_with(' ');
            }
            rest = &rest[len..];
        }
        if collapse {
            while out.ends_with(SPACE_MARK) {
                out.pop();
            }
        }
        out
    }

    /// What the start of `text` normalizes to, and how many bytes of it that takes: the
    /// charsmap's longest match, or else the first character as it is.
    fn next_piece<'a>(&'a self, text: &'a str) -> Option<(&'a str, usize)> {
        if let Some((len, r)) = self.charsmap.as_ref().and_then(|m| m.longest_match(text)) {
            return Some((r, len));
        }
        let len = text.chars().next()?.len_utf8();
        Some((&text[..len], len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(pieces: &[(&str, f32)], remove_extra_whitespaces: bool) -> UgmModel {
        let mut all = vec![("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)];
        all.extend_from_slice(pieces);
        let types: Vec<TokenType> = all
            .iter()
            .enumerate()
            .map(|(i, (p, _))| match i {
                0 | 1 => TokenType::Control,
                2 => TokenType::Unknown,
                _ if p.starts_with("<0x") => TokenType::Byte,
                _ => TokenType::Normal,
            })
            .collect();
        let names: Vec<String> = all.iter().map(|(p, _)| p.to_string()).collect();
        let scores: Vec<f32> = all.iter().map(|(_, s)| *s).collect();
        UgmModel::new(&names, &types, &scores, 2, None, remove_extra_whitespaces).unwrap()
    }

    #[test]
    fn whitespace_as_sentencepiece_normalizes_it() {
        let m = model(&[], true);
        assert_eq!(m.normalize("  a  b c  ", true), "▁a▁b▁c");
        assert_eq!(m.normalize("   ", true), "");
        assert_eq!(m.normalize("a b", false), "a▁b");
        let m = model(&[], false);
        assert_eq!(m.normalize("  a  b ", true), "▁▁▁a▁▁b▁");
        assert_eq!(m.normalize("", true), "");
    }

    #[test]
    fn highest_scoring_segmentation() {
        let m = model(
            &[
                ("▁", -2.0),
                ("a", -3.0),
                ("b", -3.0),
                ("▁ab", -4.0),
                ("▁a", -1.0),
            ],
            true,
        );
        let mut out = Vec::new();
        // ▁ab (-4) beats ▁ + a + b (-8), and ties with ▁a + b (-4): the path found first stays.
        m.encode("ab", true, &mut out);
        assert_eq!(out, [6]);
        out.clear();
        // Control pieces are not matched in text; unknown runs become one unknown token.
        m.encode("a</s>xy", true, &mut out);
        assert_eq!(out, [7, 2]);
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes() {
        let mut pieces: Vec<(String, f32)> =
            (0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0)).collect();
        pieces.push(("▁a".into(), -1.0));
        let pieces: Vec<(&str, f32)> = pieces.iter().map(|(p, s)| (p.as_str(), *s)).collect();
        let m = model(&pieces, true);
        let mut out = Vec::new();
        m.encode("aé", true, &mut out);
        // ▁a, then é's bytes C3 A9 (byte b is token 3 + b).
        assert_eq!(out, [3 + 256, 3 + 0xC3, 3 + 0xA9]);
    }
}
