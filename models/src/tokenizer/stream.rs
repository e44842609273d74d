//! Streaming detokenization. A token may end in the middle of a UTF-8 sequence (byte-level
//! BPE splits rare characters and emoji into byte tokens), so [`StreamDecoder`] holds the
//! incomplete tail until the next token completes it: streamed text never shows a
//! replacement character mid-word, and the pieces it emits concatenate to exactly what
//! [`Tokenizer::decode`] returns for the whole sequence.

use super::{TokenType, Tokenizer};

/// Decodes one sequence token by token. It keeps no reference to the tokenizer, so a runtime
/// can hold one per request next to a shared tokenizer.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    /// Bytes of an incomplete UTF-8 sequence (at most 3).
    pending: Vec<u8>,
    skip_special: bool,
    /// The next text token may carry the space prefix a SentencePiece encoder added.
    at_word_start: bool,
}

impl StreamDecoder {
    /// A decoder at the start of a sequence; markup tokens ([`TokenType::is_markup`]) are
    /// dropped if `skip_special`.
    pub fn new(skip_special: bool) -> Self {
        StreamDecoder {
            pending: Vec::new(),
            skip_special,
            at_word_start: true,
        }
    }

    /// Decodes token `id` and returns the text that is now complete (often empty while a
    /// multi-byte character is being assembled).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        let strips_prefix = tokenizer.strips_space_prefix();
        let Some(bytes) = tokenizer.token_bytes(id) else {
            self.pending.extend_from_slice("\u{FFFD}".as_bytes());
            return self.drain();
        };
        let kind = tokenizer.token_type(id);
        // Unused rows (T5's `[PAD{i}]` past its pieces) spell no text, as in llama.cpp.
        if self.skip_special && kind == Some(TokenType::Unused) {
            return String::new();
        }
        if kind.is_some_and(|t| t.is_special()) {
            // The encoder adds a space prefix after every special token.
            self.at_word_start = true;
            if self.skip_special && kind.is_some_and(|t| t.is_markup()) {
                return String::new();
            }
            self.pending.extend_from_slice(bytes);
        } else {
            let bytes = match bytes {
                [b' ', rest @ ..] if strips_prefix && self.at_word_start => rest,
                _ => bytes,
            };
            self.at_word_start = false;
            self.pending.extend_from_slice(bytes);
        }
        self.drain()
    }

    /// Ends the sequence: whatever is still pending (an incomplete character) comes out as
    /// U+FFFD. The decoder is then ready for a new sequence.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.at_word_start = true;
        text
    }

    /// Moves every complete character out of `pending`; invalid bytes (that no later byte
    /// can complete) become U+FFFD, an incomplete tail stays.
    fn drain(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // valid_up_to guarantees this prefix is UTF-8.
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        None => {
                            rest = after;
                            break;
                        }
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}
