//! GPT-2's byte-level alphabet: every byte gets a printable character so that byte-level BPE
//! vocabularies can be stored as text. Printable Latin-1 bytes map to themselves; the other
//! 68 bytes map to U+0100 onwards in byte order (space 0x20 becomes `Ġ`, newline `Ċ`).

/// Byte -> character, and character -> byte for the 256 characters of the alphabet.
pub(crate) struct ByteLevel {
    to_char: [char; 256],
    /// The byte each of U+0100..U+0143 stands for.
    from_high: [u8; 68],
}

impl ByteLevel {
    pub(crate) fn new() -> Self {
        let mut to_char = ['\0'; 256];
        let mut from_high = [0u8; 68];
        let mut next = 0u32;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            to_char[b as usize] = if printable {
                char::from(b)
            } else {
                // U+0100.. are all valid scalar values, so this never falls back.
                let c = char::from_u32(256 + next).unwrap_or(char::REPLACEMENT_CHARACTER);
                from_high[next as usize] = b;
                next += 1;
                c
            };
        }
        ByteLevel { to_char, from_high }
    }

    /// Appends the byte-level spelling of `text` to `out`.
    #[cfg(test)]
    pub(crate) fn encode_into(&self, text: &str, out: &mut String) {
        out.extend(text.bytes().map(|b| self.to_char[b as usize]));
    }

    /// The character standing for byte `b`.
    pub(crate) fn char_of(&self, b: u8) -> char {
        self.to_char[b as usize]
    }

    /// The byte a character stands for, or `None` for characters outside the alphabet.
    pub(crate) fn byte_of(&self, c: char) -> Option<u8> {
        let u = c as u32;
        // Printable bytes stand for themselves; the rest are U+0100..U+0143 in byte order.
        if u < 256 && self.to_char[u as usize] == c {
            return Some(u as u8);
        }
        u.checked_sub(256)
            .and_then(|i| self.from_high.get(i as usize))
            .copied()
    }

    /// The bytes a byte-level token spells; a token with characters outside the alphabet
    /// (added tokens stored as plain text) is its own UTF-8, as Hugging Face decodes it.
    pub(crate) fn decode(&self, piece: &str) -> Vec<u8> {
        piece
            .chars()
            .map(|c| self.byte_of(c))
            .collect::<Option<Vec<u8>>>()
            .unwrap_or_else(|| piece.as_bytes().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_is_gpt2s() {
        let bl = ByteLevel::new();
        let mut s = String::new();
        bl.encode_into(" \n\t!é", &mut s);
        assert_eq!(s, "ĠĊĉ!Ã©");
        assert_eq!(bl.decode(&s), " \n\t!é".as_bytes());
        for b in 0..=255u8 {
            assert_eq!(bl.byte_of(bl.to_char[b as usize]), Some(b));
        }
        assert_eq!(bl.byte_of('✓'), None);
        assert_eq!(bl.decode("a✓"), "a✓".as_bytes());
    }
}
