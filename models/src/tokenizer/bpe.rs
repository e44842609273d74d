//! BPE by merge rank. Byte-level BPE (GPT-2 style, `tokenizer.ggml.model = "gpt2"`):
//! pre-tokenize into words, spell each word in the byte-level alphabet, then merge adjacent
//! symbols by merge rank, lowest rank first and leftmost first among equals, until no ranked
//! pair remains. BPE over characters ([`CharBpeModel`], `tokenizer.ggml.model = "gemma4"`):
//! spaces spelled `▁`, the text cut only between newlines and the rest, each run spelled one
//! symbol per character and merged by rank the same way, and characters the vocabulary lacks
//! spelled as `<0xXX>` byte tokens.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::bytelevel::ByteLevel;
use super::pretok::PreTokenizer;
use super::spm::SPACE_MARK;

pub(crate) struct BpeModel {
    merges: Merges,
    /// The token of each byte's byte-level character (the initial symbols of every word).
    byte_ids: [Option<u32>; 256],
    /// Where whole words skip the merges (`PreTokenizer::ignore_merges`).
    whole_words: Option<Box<WholeWords>>,
    pre: PreTokenizer,
}

/// Every token by its byte-level spelling, and how each byte is spelled.
struct WholeWords {
    ids: HashMap<String, u32>,
    byte_level: ByteLevel,
}

const NONE: usize = usize::MAX;

/// One symbol of a word being merged; symbols form a linked list so merges are O(1).
struct Symbol {
    id: u32,
    prev: usize,
    next: usize,
    alive: bool,
}

/// The id of a character the vocabulary lacks (its symbol never merges).
const NO_TOKEN: u32 = u32::MAX;

/// The merge table: (left id, right id) -> (rank, merged id).
struct Merges(HashMap<(u32, u32), (u32, u32)>);

impl Merges {
    /// Builds the merge table from `tokenizer.ggml.merges` ("left right" per entry). Entries
    /// whose parts or result are not in the vocabulary are skipped, as llama.cpp does: such a
    /// merge can never produce a token. Returns the index of an entry without a separator.
    fn new(ids: &HashMap<String, u32>, merges: &[String]) -> Result<Self, usize> {
        let mut table = HashMap::with_capacity(merges.len());
        for (rank, merge) in merges.iter().enumerate() {
            // The separator is the first space after the first character, as llama.cpp
            // splits: byte-level pieces never contain a space (it is spelled `Ġ`), and
            // character pieces spell it `▁`.
            let split = merge
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| i)
                .ok_or(rank)?;
            let (left, right) = (&merge[..split], &merge[split + 1..]);
            let merged = format!("{left}{right}");
            if let (Some(&l), Some(&r), Some(&m)) =
                (ids.get(left), ids.get(right), ids.get(&merged))
            {
                table.entry((l, r)).or_insert((rank as u32, m));
            }
        }
        Ok(Merges(table))
    }
}

impl BpeModel {
    /// The model of `tokenizer.ggml.merges` (see [`Merges::new`]) over the byte-level
    /// alphabet. Returns the index of a merge entry without a separator.
    pub(crate) fn new(
        ids: &HashMap<String, u32>,
        merges: &[String],
        pre: PreTokenizer,
    ) -> Result<Self, usize> {
        let byte_level = ByteLevel::new();
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = ids.get(&byte_level.char_of(b as u8).to_string()).copied();
        }
        Ok(BpeModel {
            merges: Merges::new(ids, merges)?,
            byte_ids,
            whole_words: pre.ignore_merges.then(|| {
                Box::new(WholeWords {
                    ids: ids.clone(),
                    byte_level,
                })
            }),
            pre,
        })
    }

    /// Appends the tokens of `text` (plain text, no special tokens) to `out`. Bytes whose
    /// character is missing from the vocabulary become `unk`, or are dropped without one
    /// (Hugging Face's behaviour).
    pub(crate) fn encode(&self, text: &str, unk: Option<u32>, out: &mut Vec<u32>) {
        let mut words = Vec::new();
        self.pre.split(text, &mut words);
        let mut symbols = Vec::new();
        let mut spelled = String::new();
        for word in words {
            if let Some(whole) = &self.whole_words {
                spelled.clear();
                spelled.extend(word.bytes().map(|b| whole.byte_level.char_of(b)));
                if let Some(&id) = whole.ids.get(&spelled) {
                    out.push(id);
                    continue;
                }
            }
            symbols.clear();
            symbols.extend(
                word.bytes()
                    .filter_map(|b| self.byte_ids[b as usize].or(unk))
                    .map(|id| Symbol {
                        id,
                        prev: NONE,
                        next: NONE,
                        alive: true,
                    }),
            );
            self.merges.merge(&mut symbols);
            out.extend(symbols.iter().filter(|s| s.alive).map(|s| s.id));
        }
    }
}

/// BPE over characters with byte fallback (`tokenizer.ggml.model = "gemma4"`), as
/// llama.cpp's BPE tokenizer runs it for that vocabulary and Hugging Face's `BPE` model with
/// `byte_fallback` under a normalizer that spells spaces `▁`.
pub(crate) struct CharBpeModel {
    merges: Merges,
    /// The token of each character that is a token by itself.
    chars: HashMap<char, u32>,
    /// The `<0xXX>` token of each byte, for characters the vocabulary lacks.
    byte_ids: [Option<u32>; 256],
    /// The tokens that are runs of newlines, by their length: such a run in the text is
    /// that token.
    newline_runs: HashMap<usize, u32>,
}

impl CharBpeModel {
    /// The model of `tokenizer.ggml.merges` (see [`Merges::new`]) over single characters.
    /// Returns the index of a merge entry without a separator.
    pub(crate) fn new(ids: &HashMap<String, u32>, merges: &[String]) -> Result<Self, usize> {
        let chars = ids
            .iter()
            .filter_map(|(piece, &id)| {
                let mut cs = piece.chars();
                let c = cs.next()?;
                cs.next().is_none().then_some((c, id))
            })
            .collect();
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = ids.get(&format!("<0x{b:02X}>")).copied();
        }
        Ok(CharBpeModel {
            merges: Merges::new(ids, merges)?,
            chars,
            byte_ids,
            newline_runs: ids
                .iter()
                .filter(|(piece, _)| !piece.is_empty() && piece.bytes().all(|b| b == b'\n'))
                .map(|(piece, &id)| (piece.len(), id))
                .collect(),
        })
    }

    /// Appends the tokens of `text` (plain text, spaces not yet spelled `▁`) to `out`.
    pub(crate) fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let escaped: String = text
            .chars()
            .map(|c| if c == ' ' { SPACE_MARK } else { c })
            .collect();
        let mut symbols = Vec::new();
        let mut spelled = Vec::new();
        // Runs of newlines and runs of anything else (llama.cpp's `[^\n]+|[\n]+`).
        let mut rest = &escaped[..];
        while let Some(first) = rest.chars().next() {
            let newlines = first == '\n';
            let end = rest
                .find(|c: char| (c == '\n') != newlines)
                .unwrap_or(rest.len());
            let (word, tail) = rest.split_at(end);
            rest = tail;
            // A run of newlines that is a token is that token, whatever the merges would
            // make of it (llama.cpp's fix for Gemma 4, as its tokenizer.json gives it).
            if newlines {
                if let Some(&id) = self.newline_runs.get(&word.len()) {
                    out.push(id);
                    continue;
                }
            }
            symbols.clear();
            spelled.clear();
            for c in word.chars() {
                let id = self.chars.get(&c).copied().unwrap_or(NO_TOKEN);
                symbols.push(Symbol {
                    id,
                    prev: NONE,
                    next: NONE,
                    alive: true,
                });
                spelled.push(c);
            }
            self.merges.merge(&mut symbols);
            for (s, &c) in symbols.iter().zip(&spelled) {
                if !s.alive {
                    continue;
                }
                if s.id != NO_TOKEN {
                    out.push(s.id);
                    continue;
                }
                // A character without a token: its UTF-8 bytes' tokens (bytes without
                // one are dropped, as llama.cpp drops them).
                let mut buf = [0u8; 4];
                for &b in c.encode_utf8(&mut buf).as_bytes() {
                    out.extend(self.byte_ids[b as usize]);
                }
            }
        }
    }
}

impl Merges {
    fn merge(&self, syms: &mut [Symbol]) {
        let n = syms.len();
        for (i, s) in syms.iter_mut().enumerate() {
            s.prev = if i == 0 { NONE } else { i - 1 };
            s.next = if i + 1 == n { NONE } else { i + 1 };
        }
        // Min-heap on (rank, position): lowest rank first, leftmost among equal ranks.
        let mut heap = BinaryHeap::new();
        let rank_at = |syms: &[Symbol], i: usize| -> Option<(u32, u32)> {
            let j = syms[i].next;
            if j == NONE {
                return None;
            }
            self.0.get(&(syms[i].id, syms[j].id)).copied()
        };
        for i in 0..n.saturating_sub(1) {
            if let Some((rank, _)) = rank_at(syms, i) {
                heap.push(Reverse((rank, i)));
            }
        }
        while let Some(Reverse((rank, i))) = heap.pop() {
            if !syms[i].alive {
                continue;
            }
            // The pair at i may have changed since this entry was pushed; ranks identify
            // merges uniquely, so an equal rank means the entry is still current.
            let Some((current, merged)) = rank_at(syms, i) else {
                continue;
            };
            if current != rank {
                continue;
            }
            let j = syms[i].next;
            let k = syms[j].next;
            syms[i].id = merged;
            syms[i].next = k;
            syms[j].alive = false;
            if k != NONE {
                syms[k].prev = i;
                if let Some((r, _)) = rank_at(syms, i) {
                    heap.push(Reverse((r, i)));
                }
            }
            let p = syms[i].prev;
            if p != NONE {
                if let Some((r, _)) = rank_at(syms, p) {
                    heap.push(Reverse((r, p)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(vocab: &[&str], merges: &[&str]) -> (BpeModel, HashMap<String, u32>) {
        let ids: HashMap<String, u32> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges: Vec<String> = merges.iter().map(|m| m.to_string()).collect();
        let pre = PreTokenizer::named(Some("gpt-2")).unwrap();
        (BpeModel::new(&ids, &merges, pre).unwrap(), ids)
    }

    #[test]
    fn merges_follow_rank_then_position() {
        let (m, ids) = model(
            &["a", "b", "Ġ", "ab", "aa", "aaa", "Ġa", "Ġab"],
            &["a b", "a a", "Ġ a", "Ġa b", "aa a"],
        );
        let enc = |t: &str| {
            let mut out = Vec::new();
            m.encode(t, None, &mut out);
            out
        };
        // "aaa": "a a" fires leftmost first, then "aa a".
        assert_eq!(enc("aaa"), vec![ids["aaa"]]);
        // "aaaa": (aa)(aa): no "aa aa" merge, and "aa a" cannot fire across pairs.
        assert_eq!(enc("aaaa"), vec![ids["aa"], ids["aa"]]);
        // " ab": "a b" (rank 0) beats "Ġ a" (rank 2), and no "Ġ ab" merge exists.
        assert_eq!(enc(" ab"), vec![ids["Ġ"], ids["ab"]]);
        // Unknown characters are dropped without an unk token.
        assert_eq!(enc("ax"), vec![ids["a"]]);
    }

    #[test]
    fn merge_without_separator_is_reported() {
        let ids: HashMap<String, u32> = [("a".to_string(), 0)].into();
        let pre = PreTokenizer::named(None).unwrap();
        let merges = ["a a".to_string(), "ab".to_string()];
        assert_eq!(BpeModel::new(&ids, &merges, pre).err(), Some(1));
    }

    #[test]
    fn character_bpe_spells_spaces_and_falls_back_to_bytes() {
        let vocab = [
            "a", "b", "▁", "ab", "▁a", "▁ab", "\n", "\n\n", "<0xC3>", "<0xA9>",
        ];
        let ids: HashMap<String, u32> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        // "\n \n" merges a newline onto a newline; a run of two is a token of its own.
        let merges: Vec<String> = ["▁ a", "▁a b", "a b", "\n \n"]
            .iter()
            .map(|m| m.to_string())
            .collect();
        let m = CharBpeModel::new(&ids, &merges).unwrap();
        let enc = |t: &str| {
            let mut out = Vec::new();
            m.encode(t, &mut out);
            out
        };
        assert_eq!(enc("ab ab"), vec![ids["ab"], ids["▁ab"]]);
        // A character without a token is its UTF-8 bytes' tokens.
        assert_eq!(enc("é a"), vec![ids["<0xC3>"], ids["<0xA9>"], ids["▁a"]]);
        // Newlines are words apart: no merge crosses them; a run that is a token is it, a
        // longer one merges pair by pair.
        assert_eq!(enc("a\n\nb"), vec![ids["a"], ids["\n\n"], ids["b"]]);
        assert_eq!(enc("\n\n\n"), vec![ids["\n\n"], ids["\n"]]);
    }
}
