//! `tokenizer.model` or `spiece.model`: a SentencePiece `ModelProto` (protocol buffers), read
//! for what a GGUF vocabulary holds: each piece with its score and type, the trainer's model
//! type (Unigram or BPE), and the normalizer's settings: whether it prepends a space to every
//! text, whether it collapses runs of spaces, and its compiled character map.
//!
//! Only the fields used are decoded; every other field is skipped by its wire type, so models
//! from any SentencePiece version read.

use std::path::Path;

use crate::error::{Error, Result};

/// A piece's kind, numbered as SentencePiece and GGUF's `tokenizer.ggml.token_type` both
/// number them.
pub(crate) const NORMAL: i32 = 1;
pub(crate) const UNKNOWN: i32 = 2;
pub(crate) const CONTROL: i32 = 3;
pub(crate) const USER_DEFINED: i32 = 4;
pub(crate) const UNUSED: i32 = 5;
pub(crate) const BYTE: i32 = 6;

pub(crate) struct Piece {
    pub text: String,
    pub score: f32,
    pub kind: i32,
}

/// `TrainerSpec.model_type`: how the pieces segment a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModelType {
    /// The most likely segmentation under the pieces' scores (T5's, mT5's); SentencePiece's
    /// default.
    Unigram,
    /// Merges in the order of the pieces' scores (Llama's, Gemma's).
    Bpe,
    /// Whole words or single characters.
    Other(u64),
}

pub(crate) struct SentencePieceModel {
    pub pieces: Vec<Piece>,
    pub model_type: ModelType,
    /// `NormalizerSpec.add_dummy_prefix` (true when absent, as in SentencePiece).
    pub add_dummy_prefix: bool,
    /// `NormalizerSpec.remove_extra_whitespaces`: leading, trailing and repeated spaces go
    /// (true when absent).
    pub remove_extra_whitespaces: bool,
    /// `NormalizerSpec.precompiled_charsmap`: the normalization rules (NFKC and the like)
    /// compiled into a double-array trie and its replacement strings; empty for none.
    pub precompiled_charsmap: Vec<u8>,
}

impl SentencePieceModel {
    /// The pieces as llama.cpp's converters lay them out over `n_vocab` rows (0: as many as
    /// the pieces): each piece's text, score and kind (`kind_of` its SentencePiece type),
    /// the rows past them `[PAD{i}]` of score -10000, unused.
    pub fn padded(
        &self,
        n_vocab: usize,
        kind_of: fn(i32) -> i32,
    ) -> (Vec<String>, Vec<f32>, Vec<i32>) {
        let n = if n_vocab == 0 {
            self.pieces.len()
        } else {
            n_vocab
        };
        let mut tokens: Vec<String> = (0..n).map(|i| format!("[PAD{i}]")).collect();
        let mut scores = vec![-10000.0f32; n];
        let mut kinds = vec![UNUSED; n];
        for (i, p) in self.pieces.iter().take(n).enumerate() {
            tokens[i] = p.text.clone();
            scores[i] = p.score;
            kinds[i] = kind_of(p.kind);
        }
        (tokens, scores, kinds)
    }

    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let bad = |reason: &str| Error::tokenizer(path.display().to_string(), reason.to_string());
        let mut model = SentencePieceModel {
            pieces: Vec::new(),
            model_type: ModelType::Unigram,
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            precompiled_charsmap: Vec::new(),
        };
        for field in Fields::new(&bytes) {
            match field.map_err(bad)? {
                (1, Wire::Bytes(piece)) => model.pieces.push(read_piece(piece).map_err(bad)?),
                (2, Wire::Bytes(trainer)) => {
                    for f in Fields::new(trainer) {
                        if let (3, Wire::Varint(v)) = f.map_err(bad)? {
                            model.model_type = match v {
                                1 => ModelType::Unigram,
                                2 => ModelType::Bpe,
                                other => ModelType::Other(other),
                            };
                        }
                    }
                }
                (3, Wire::Bytes(normalizer)) => {
                    for f in Fields::new(normalizer) {
                        match f.map_err(bad)? {
                            (2, Wire::Bytes(map)) => model.precompiled_charsmap = map.to_vec(),
                            (3, Wire::Varint(v)) => model.add_dummy_prefix = v != 0,
                            (4, Wire::Varint(v)) => model.remove_extra_whitespaces = v != 0,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        if model.pieces.is_empty() {
            return Err(bad("no pieces: not a SentencePiece model"));
        }
        Ok(model)
    }
}

fn read_piece(bytes: &[u8]) -> std::result::Result<Piece, &'static str> {
    let mut piece = Piece {
        text: String::new(),
        score: 0.0,
        kind: NORMAL,
    };
    for field in Fields::new(bytes) {
        match field? {
            (1, Wire::Bytes(text)) => {
                piece.text = String::from_utf8(text.to_vec()).map_err(|_| "a piece is not UTF-8")?
            }
            (2, Wire::Fixed32(bits)) => piece.score = f32::from_bits(bits),
            (3, Wire::Varint(kind)) => piece.kind = kind as i32,
            _ => {}
        }
    }
    Ok(piece)
}

/// One field's value by wire type.
enum Wire<'a> {
    Varint(u64),
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one message, in order: (field number, value).
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Fields { bytes, at: 0 }
    }

    fn varint(&mut self) -> std::result::Result<u64, &'static str> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or("truncated")?;
            self.at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes")
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], &'static str> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or("truncated")?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = std::result::Result<(u64, Wire<'a>), &'static str>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let field = (|| {
            let key = self.varint()?;
            let value = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    Wire::Fixed64
                }
                2 => {
                    let n = usize::try_from(self.varint()?).map_err(|_| "too long")?;
                    Wire::Bytes(self.take(n)?)
                }
                5 => {
                    let b = self.take(4)?;
                    Wire::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                }
                _ => return Err("an unknown wire type: not a SentencePiece model"),
            };
            Ok((key >> 3, value))
        })();
        if field.is_err() {
            self.at = self.bytes.len();
        }
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(n: u64, body: &[u8], out: &mut Vec<u8>) {
        varint(n << 3 | 2, out);
        varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }

    fn piece(text: &str, score: f32, kind: Option<u64>) -> Vec<u8> {
        let mut p = Vec::new();
        bytes_field(1, text.as_bytes(), &mut p);
        varint(2 << 3 | 5, &mut p);
        p.extend_from_slice(&score.to_le_bytes());
        if let Some(k) = kind {
            varint(3 << 3, &mut p);
            varint(k, &mut p);
        }
        p
    }

    #[test]
    fn pieces_scores_kinds_and_the_normalizer_read() {
        let mut m = Vec::new();
        bytes_field(1, &piece("<unk>", 0.0, Some(2)), &mut m);
        bytes_field(1, &piece("▁the", -3.5, None), &mut m);
        // A trainer spec (field 2): BPE, and fields to skip (a varint and a fixed64).
        let mut trainer = Vec::new();
        varint(3 << 3, &mut trainer);
        varint(2, &mut trainer);
        varint(7 << 3, &mut trainer);
        varint(300, &mut trainer);
        varint(9 << 3 | 1, &mut trainer);
        trainer.extend_from_slice(&[0; 8]);
        bytes_field(2, &trainer, &mut m);
        // A normalizer's name (skipped), its map, no dummy prefix; remove_extra_whitespaces
        // left to its default.
        let mut normalizer = Vec::new();
        bytes_field(1, b"nmt_nfkc", &mut normalizer);
        bytes_field(2, &[7, 0, 0, 0, 1, 2, 3], &mut normalizer);
        varint(3 << 3, &mut normalizer);
        varint(0, &mut normalizer);
        bytes_field(3, &normalizer, &mut m);

        let dir = std::env::temp_dir().join(format!("hearth-spm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.model");
        std::fs::write(&path, &m).unwrap();
        let model = SentencePieceModel::read(&path).unwrap();
        assert_eq!(model.pieces.len(), 2);
        assert_eq!(
            (model.pieces[0].text.as_str(), model.pieces[0].kind),
            ("<unk>", UNKNOWN)
        );
        let the = &model.pieces[1];
        assert_eq!(
            (the.text.as_str(), the.score, the.kind),
            ("▁the", -3.5, NORMAL)
        );
        assert!(!model.add_dummy_prefix);
        assert!(model.remove_extra_whitespaces);
        assert_eq!(model.model_type, ModelType::Bpe);
        assert_eq!(model.precompiled_charsmap, [7, 0, 0, 0, 1, 2, 3]);

        // Truncated and foreign files are errors naming the file.
        std::fs::write(&path, &m[..m.len() - 3]).unwrap();
        let err = SentencePieceModel::read(&path).err().unwrap().to_string();
        assert!(
            err.contains("tokenizer.model") && err.contains("truncated"),
            "{err}"
        );
        std::fs::write(&path, b"{\"json\": true}").unwrap();
        assert!(SentencePieceModel::read(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
