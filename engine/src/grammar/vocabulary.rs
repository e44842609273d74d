//! The vocabulary as llguidance reads it: every token's bytes in a token trie, and the parser
//! factory that compiles grammars against it. Built once per tokenizer, on the first request
//! with a grammar, and kept beside the tokenizer ([`Tokenizer::derived`]).
//!
//! Markup tokens (control and unknown ones, which the stream leaves out of the text) and unused
//! ones are stored behind llguidance's [`TokTrie::SPECIAL_TOKEN_MARKER`], a byte no
//! UTF-8 text contains: no grammar can spell one as text, and a grammar names one only on
//! purpose (`<[id]>`). The end-of-generation tokens are the trie's EOS tokens, the only
//! tokens allowed once a grammar is complete.

use std::sync::Arc;

use hearth_model::{Error, Result};
use hearth_models::tokenizer::TokenType;
use hearth_models::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{ParserFactory, TokenParser};

/// A tokenizer's tokens in llguidance's trie, with the factory that compiles grammars over it.
pub struct Vocabulary {
    factory: ParserFactory,
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocabulary")
            .field("tokens", &self.len())
            .finish_non_exhaustive()
    }
}

impl Vocabulary {
    /// The vocabulary of `tokenizer`, built on first use and shared afterwards.
    pub fn of(tokenizer: &Tokenizer) -> Result<Arc<Self>> {
        tokenizer.derived(Self::new)
    }

    /// Builds the trie of `tokenizer`'s tokens (tens of milliseconds for a vocabulary of
    /// 50k tokens); [`of`](Self::of) builds it once.
    pub fn new(tokenizer: &Tokenizer) -> Result<Self> {
        let n = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let bytes = tokenizer.token_bytes(id).unwrap_or_default();
                let markup = tokenizer
                    .token_type(id)
                    .is_some_and(|t| t.is_markup() || t == TokenType::Unused);
                if markup {
                    [&[TokTrie::SPECIAL_TOKEN_MARKER], bytes].concat()
                } else {
                    bytes.to_vec()
                }
            })
            .collect();
        let eos = tokenizer.end_of_generation();
        let info = TokRxInfo::new(n as u32, eos.first().copied().unwrap_or(n as u32));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(eos);
        let env: llguidance::toktrie::TokEnv = Arc::new(TrieEnv { trie });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| Error::options("grammar", format!("vocabulary: {e}")))?;
        // Warnings reach the caller through errors and tracing, not stderr.
        factory.quiet();
        Ok(Self { factory })
    }

    /// Tokens in the vocabulary.
    pub fn len(&self) -> usize {
        self.trie().vocab_size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The end-of-generation tokens: what a complete grammar allows.
    pub fn end_of_generation(&self) -> &[TokenId] {
        self.trie().eos_tokens()
    }

    pub(crate) fn trie(&self) -> &TokTrie {
        self.factory.tok_env().tok_trie()
    }

    /// The id of the token spelled `text`: a special token by its text (`<|im_end|>`), else a
    /// text token.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        let marked = [&[TokTrie::SPECIAL_TOKEN_MARKER], text.as_bytes()].concat();
        let trie = self.trie();
        trie.token_id(&marked)
            .or_else(|| trie.token_id(text.as_bytes()))
    }

    /// A parser for `grammar` over this vocabulary, at the start of the text.
    pub(crate) fn parser(
        &self,
        grammar: TopLevelGrammar,
    ) -> std::result::Result<TokenParser, String> {
        self.factory
            .create_parser(grammar)
            .map_err(|e| e.to_string())
    }
}

/// llguidance's view of the tokenizer: the trie, and a greedy tokenization over it (used only
/// for text a grammar forces, which Hearth does not ask for).
struct TrieEnv {
    trie: TokTrie,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}
