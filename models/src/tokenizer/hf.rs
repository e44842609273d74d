//! Hugging Face `tokenizer.json` files (WordPiece for BERT-style embedding models such as
//! all-MiniLM-L6-v2, and anything else the `tokenizers` crate reads), behind a small wrapper
//! so the rest of Hearth does not depend on that crate's types.

use std::path::Path;

use crate::error::{Error, Result};

/// A tokenizer loaded from a `tokenizer.json`.
pub struct HfTokenizer {
    source: String,
    inner: tokenizers::Tokenizer,
}

/// One encoded text, as an encoder model consumes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfEncoding {
    pub ids: Vec<u32>,
    /// Segment ids (BERT's token_type_ids).
    pub type_ids: Vec<u32>,
    /// 1 for real tokens, 0 for padding.
    pub attention_mask: Vec<u32>,
    /// The tokens as the vocabulary spells them.
    pub tokens: Vec<String>,
}

impl HfTokenizer {
    /// Loads `path` (a `tokenizer.json`), or `path/tokenizer.json` when `path` is a model
    /// directory.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_path_buf()
        };
        let source = file.display().to_string();
        let text = std::fs::read(&file).map_err(|e| Error::io(&file, e))?;
        let inner = tokenizers::Tokenizer::from_bytes(&text)
            .map_err(|e| Error::tokenizer(&source, e.to_string()))?;
        Ok(HfTokenizer { source, inner })
    }

    /// Encodes `text`; `add_special` adds the tokens the file's post-processor asks for
    /// (`[CLS]` ... `[SEP]` for BERT).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<HfEncoding> {
        let enc = self
            .inner
            .encode(text, add_special)
            .map_err(|e| Error::tokenizer(&self.source, e.to_string()))?;
        Ok(HfEncoding {
            ids: enc.get_ids().to_vec(),
            type_ids: enc.get_type_ids().to_vec(),
            attention_mask: enc.get_attention_mask().to_vec(),
            tokens: enc.get_tokens().to_vec(),
        })
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| Error::tokenizer(&self.source, e.to_string()))
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn piece(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The file it came from.
    pub fn source(&self) -> &str {
        &self.source
    }
}
