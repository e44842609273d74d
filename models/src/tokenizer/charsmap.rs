//! SentencePiece's precompiled normalization map (`tokenizer.ggml.precompiled_charsmap`, the
//! `precompiled_charsmap` of a model's normalizer spec, e.g. NFKC for T5): a double-array trie
//! over UTF-8 byte strings whose leaves point into a blob of NUL-terminated replacements.
//! SentencePiece replaces the longest match at each position of the text.
//!
//! Layout: a little-endian u32, the trie's length in bytes; the trie's units, u32 each; the
//! replacements. A unit packs the label of the byte that leads to it (bits 0-7; bit 31 is set
//! in a leaf's value unit, so that no byte matches it), whether the node ends a key (bit 8),
//! and the offset from its index to its children's (bits 10-30, shifted left by 8 when bit 9
//! is set). A node's child for byte `c` is at `index ^ offset ^ c`; the value unit of a node
//! that ends a key is at `index ^ offset`, the replacement's byte offset in its bits 0-30.
//!
//! The map is checked when it is read: every key the trie holds leads to a replacement, so a
//! lookup never fails, and an index a damaged map gives is bounds-checked all the same.
//! (`tokenizers::normalizers::Precompiled` reads the same map, but indexes it unchecked, so a
//! damaged one panics mid-encode, and looks up whole grapheme clusters of under 6 bytes
//! first, so it leaves Hangul jamo (6 or 9 bytes a syllable) uncomposed where SentencePiece
//! composes them.)

pub(super) struct Charsmap {
    units: Vec<u32>,
    /// The replacements, each ending in NUL.
    replacements: String,
}

fn has_leaf(unit: u32) -> bool {
    (unit >> 8) & 1 == 1
}

fn value(unit: u32) -> usize {
    (unit & ((1 << 31) - 1)) as usize
}

fn label(unit: u32) -> u32 {
    unit & ((1 << 31) | 0xFF)
}

fn offset(unit: u32) -> usize {
    ((unit >> 10) << ((unit & (1 << 9)) >> 6)) as usize
}

impl Charsmap {
    /// Reads and checks a precompiled charsmap.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let Some((&len, rest)) = bytes.split_first_chunk::<4>() else {
            return Err(format!(
                "{} bytes, too short for the trie's length",
                bytes.len()
            ));
        };
        let trie_len = u32::from_le_bytes(len) as usize;
        if trie_len == 0 || trie_len % 4 != 0 || trie_len > rest.len() {
            return Err(format!(
                "a trie of {trie_len} bytes does not fit the {} bytes that follow its length",
                rest.len()
            ));
        }
        let (trie, blob) = rest.split_at(trie_len);
        let units = trie
            .chunks_exact(4)
            .map(|u| u32::from_le_bytes([u[0], u[1], u[2], u[3]]))
            .collect();
        let replacements = String::from_utf8(blob.to_vec())
            .map_err(|e| format!("the replacement strings are not UTF-8 ({e})"))?;
        let map = Charsmap {
            units,
            replacements,
        };
        map.check()?;
        Ok(map)
    }

    /// The longest key at the start of `text`: its length in bytes and its replacement.
    pub fn longest_match(&self, text: &str) -> Option<(usize, &str)> {
        let mut node = offset(*self.units.first()?);
        let mut found = None;
        for (i, &c) in text.as_bytes().iter().enumerate() {
            // No key holds NUL: it is the trie's terminator.
            if c == 0 {
                break;
            }
            node ^= c as usize;
            match self.units.get(node) {
                Some(&unit) if label(unit) == c as u32 => {
                    node ^= offset(unit);
                    if has_leaf(unit) && text.is_char_boundary(i + 1) {
                        if let Some(r) = self.replacement_at(node) {
                            found = Some((i + 1, r));
                        }
                    }
                }
                _ => break,
            }
        }
        found
    }

    /// The replacement of the node whose value unit is at `index`.
    fn replacement_at(&self, index: usize) -> Option<&str> {
        let rest = self.replacements.get(value(*self.units.get(index)?)..)?;
        rest.find('\0').map(|end| &rest[..end])
    }

    /// Walks every node the root reaches: each key's end must lead to a replacement.
    fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.units.len()];
        let mut stack = vec![offset(self.units[0])];
        while let Some(node) = stack.pop() {
            for c in 1..=0xFF_u32 {
                let child = node ^ c as usize;
                let Some(&unit) = self.units.get(child) else {
                    continue;
                };
                if label(unit) != c {
                    continue;
                }
                let next = child ^ offset(unit);
                if has_leaf(unit) && self.replacement_at(next).is_none() {
                    return Err(format!(
                        "trie unit {child} ends a key with no replacement string"
                    ));
                }
                if next < seen.len() && !std::mem::replace(&mut seen[next], true) {
                    stack.push(next);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map of "a" -> "x" and "ab" -> "yz", laid out by hand: the root at 0 with its
    /// children at offset 2, so 'a' (0x61) lives at 2 ^ 0x61 = 0x63; from there offset 1 puts
    /// the value unit of "a" at 0x62 and 'b' (0x62) at 0x62 ^ 0x62 = 0; that is taken, so "ab"
    /// continues from 'a' by offset 4: 'b' at 0x67 ^ 0x62 = 5, its value at 5 ^ 1 = 4.
    fn tiny() -> Vec<u8> {
        let unit =
            |label: u32, leaf: bool, offset: u32| label | ((leaf as u32) << 8) | (offset << 10);
        let value = |at: u32| at | (1 << 31);
        let mut units = vec![0u32; 0x68];
        units[0] = unit(0, false, 2);
        units[0x63] = unit(0x61, true, 4); // 'a': value at 0x67, children from 0x67
        units[0x67] = value(0); // "a" -> "x"
        units[0x67 ^ 0x62] = unit(0x62, true, 1); // 'b' at 5: value at 4
        units[4] = value(2); // "ab" -> "yz"
        let mut bytes = ((units.len() * 4) as u32).to_le_bytes().to_vec();
        for u in units {
            bytes.extend(u.to_le_bytes());
        }
        bytes.extend(b"x\0yz\0");
        bytes
    }

    #[test]
    fn longest_key_wins() {
        let map = Charsmap::parse(&tiny()).unwrap();
        assert_eq!(map.longest_match("abc"), Some((2, "yz")));
        assert_eq!(map.longest_match("ac"), Some((1, "x")));
        assert_eq!(map.longest_match("ba"), None);
        assert_eq!(map.longest_match(""), None);
    }

    #[test]
    fn damaged_maps_are_refused() {
        assert!(Charsmap::parse(&[1, 2]).is_err());
        // A length of zero, one that is no multiple of four, one past the end.
        assert!(Charsmap::parse(&[0, 0, 0, 0]).is_err());
        assert!(Charsmap::parse(&[3, 0, 0, 0, 1, 2, 3]).is_err());
        assert!(Charsmap::parse(&[8, 0, 0, 0, 1, 2, 3, 4]).is_err());
        // A key whose replacement lies past the strings, and one not NUL-terminated.
        let mut bytes = tiny();
        let n = bytes.len();
        bytes[n - 1] = b'!';
        assert!(Charsmap::parse(&bytes).is_err());
        let mut bytes = tiny();
        bytes.truncate(n - 5);
        assert!(Charsmap::parse(&bytes).is_err());
        // Replacements that are not UTF-8.
        let mut bytes = tiny();
        bytes[n - 4] = 0xFF;
        assert!(Charsmap::parse(&bytes).is_err());
    }
}
