//! Special tokens: the ids a runtime needs (BOS, EOS, ...), the flags that say when to add
//! them, and splitting text on special-token strings before BPE so that `<|im_start|>` in a
//! prompt becomes one token instead of being spelled out.

use std::ops::Range;

use aho_corasick::{AhoCorasick, MatchKind};

/// A piece of text to encode: plain text, or a special token found in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// Ids and flags from `tokenizer.ggml.*`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End of turn, for chat models that distinguish it from end of text.
    pub eot: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    /// Prepend BOS when encoding with special tokens.
    pub add_bos: bool,
    /// Append EOS when encoding with special tokens.
    pub add_eos: bool,
    /// Prepend a space to text (SentencePiece models), so that the first word is spelled
    /// like every other word.
    pub add_space_prefix: bool,
}

/// Finds special-token strings in text, longest match first at the leftmost position (as
/// Hugging Face matches added tokens).
pub(crate) struct SpecialMatcher {
    matcher: AhoCorasick,
    ids: Vec<u32>,
}

impl SpecialMatcher {
    /// `None` when there are no (non-empty) special strings.
    pub(crate) fn new(tokens: impl IntoIterator<Item = (String, u32)>) -> Option<Self> {
        let (strings, ids): (Vec<String>, Vec<u32>) =
            tokens.into_iter().filter(|(s, _)| !s.is_empty()).unzip();
        if strings.is_empty() {
            return None;
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&strings)
            .ok()?;
        Some(SpecialMatcher { matcher, ids })
    }

    /// Every special-token string in `text`: its token and where it lies.
    pub(crate) fn find(&self, text: &str) -> Vec<(u32, Range<usize>)> {
        self.matcher
            .find_iter(text)
            .map(|m| (self.ids[m.pattern().as_usize()], m.range()))
            .collect()
    }

    /// Splits `text` into plain-text and special-token fragments, dropping empty text.
    pub(crate) fn split<'t>(&self, text: &'t str, out: &mut Vec<Fragment<'t>>) {
        self.split_where(text, |_, _| true, out);
    }

    /// [`split`](Self::split), taking only the matches `take(id, span)` accepts; the text of
    /// the others stays in the plain text around it.
    pub(crate) fn split_where<'t>(
        &self,
        text: &'t str,
        take: impl Fn(u32, Range<usize>) -> bool,
        out: &mut Vec<Fragment<'t>>,
    ) {
        let mut pos = 0;
        for m in self.matcher.find_iter(text) {
            if !take(self.ids[m.pattern().as_usize()], m.range()) {
                continue;
            }
            if m.start() > pos {
                out.push(Fragment::Text(&text[pos..m.start()]));
            }
            out.push(Fragment::Token(self.ids[m.pattern().as_usize()]));
            pos = m.end();
        }
        if pos < text.len() {
            out.push(Fragment::Text(&text[pos..]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_special_wins() {
        let m = SpecialMatcher::new([
            ("<|im".to_string(), 7),
            ("<|im_start|>".to_string(), 1),
            ("<|im_end|>".to_string(), 2),
        ])
        .unwrap();
        let mut out = Vec::new();
        m.split("<|im_start|>user\nHi<|im_end|><|im", &mut out);
        assert_eq!(
            out,
            [
                Fragment::Token(1),
                Fragment::Text("user\nHi"),
                Fragment::Token(2),
                Fragment::Token(7)
            ]
        );
    }
}
