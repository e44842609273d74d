//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`, Llama 1/2, Mistral): spaces become
//! `▁`, the text starts as one symbol per character, and the adjacent pair whose
//! concatenation is the highest-scoring vocabulary entry merges first (leftmost among equal
//! scores), as llama.cpp's and SentencePiece's BPE do. Characters left without a token fall
//! back to `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// SentencePiece's word-boundary mark, standing for a space.
pub(crate) const SPACE_MARK: char = '\u{2581}';

pub(crate) struct SpmModel {
    scores: Vec<f32>,
    /// The `<0xXX>` token of each byte, for characters the vocabulary lacks.
    byte_ids: [Option<u32>; 256],
}

const NONE: usize = usize::MAX;

/// A run of the input text that is currently one symbol.
struct Symbol {
    start: usize,
    end: usize,
    prev: usize,
    next: usize,
}

/// A candidate merge of symbol `left` with its successor.
struct Bigram {
    score: f32,
    left: usize,
    /// Bytes the merged symbol spans; a mismatch on pop means the entry is stale.
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl SpmModel {
    /// `scores[i]` is token i's score; byte tokens are found by their `<0xXX>` spelling.
    pub(crate) fn new(ids: &HashMap<String, u32>, scores: Vec<f32>) -> Self {
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = ids.get(&format!("<0x{b:02X}>")).copied();
        }
        SpmModel { scores, byte_ids }
    }

    /// Appends the tokens of `text` to `out`. `text` must already have its spaces replaced
    /// by `▁` (and the space prefix added, if the model wants one).
    pub(crate) fn encode(
        &self,
        text: &str,
        ids: &HashMap<String, u32>,
        unk: Option<u32>,
        out: &mut Vec<u32>,
    ) {
        let mut syms: Vec<Symbol> = text
            .char_indices()
            .map(|(i, c)| Symbol {
                start: i,
                end: i + c.len_utf8(),
                prev: NONE,
                next: NONE,
            })
            .collect();
        let n = syms.len();
        for (i, s) in syms.iter_mut().enumerate() {
            s.prev = if i == 0 { NONE } else { i - 1 };
            s.next = if i + 1 == n { NONE } else { i + 1 };
        }

        let mut heap = BinaryHeap::new();
        let bigram = |syms: &[Symbol], left: usize| -> Option<Bigram> {
            let right = syms.get(left)?.next;
            if right == NONE {
                return None;
            }
            let (start, end) = (syms[left].start, syms[right].end);
            let id = *ids.get(&text[start..end])?;
            Some(Bigram {
                score: self.scores.get(id as usize).copied().unwrap_or(f32::MIN),
                left,
                len: end - start,
            })
        };
        for i in 0..n.saturating_sub(1) {
            heap.extend(bigram(&syms, i));
        }
        while let Some(b) = heap.pop() {
            let left = b.left;
            let right = syms[left].next;
            // Merged-away symbols have start == end; a changed span means a stale entry.
            if syms[left].start == syms[left].end
                || right == NONE
                || syms[right].end - syms[left].start != b.len
            {
                continue;
            }
            syms[left].end = syms[right].end;
            syms[right].start = syms[right].end;
            let next = syms[right].next;
            syms[left].next = next;
            if next != NONE {
                syms[next].prev = left;
            }
            let prev = syms[left].prev;
            if prev != NONE {
                heap.extend(bigram(&syms, prev));
            }
            heap.extend(bigram(&syms, left));
        }

        let mut i = if n == 0 { NONE } else { 0 };
        while i != NONE {
            let piece = &text[syms[i].start..syms[i].end];
            match ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for b in piece.bytes() {
                        out.extend(self.byte_ids[b as usize].or(unk));
                    }
                }
            }
            i = syms[i].next;
        }
    }
}
