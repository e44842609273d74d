//! Byte-level BPE (GPT-2 style, `tokenizer.ggml.model = "gpt2"`): pre-tokenize into words,
//! spell each word in the byte-level alphabet, then merge adjacent symbols by merge rank,
//! lowest rank first and leftmost first among equals, until no ranked pair remains.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::bytelevel::ByteLevel;
use super::pretok::PreTokenizer;

pub(crate) struct BpeModel {
    /// (left id, right id) -> (rank, merged id)
    merges: HashMap<(u32, u32), (u32, u32)>,
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

impl BpeModel {
    /// Builds the merge table from `tokenizer.ggml.merges` ("left right" per entry). Entries
    /// whose parts or result are not in the vocabulary are skipped, as llama.cpp does: such a
    /// merge can never produce a token. Returns the index of an entry without a separator.
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
        let mut table = HashMap::with_capacity(merges.len());
        for (rank, merge) in merges.iter().enumerate() {
            // The separator is the first space after the first character: pieces never
            // contain a space themselves (it is spelled `Ġ`).
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
        Ok(BpeModel {
            merges: table,
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
            self.merge(&mut symbols);
            out.extend(symbols.iter().filter(|s| s.alive).map(|s| s.id));
        }
    }

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
            self.merges.get(&(syms[i].id, syms[j].id)).copied()
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
}
