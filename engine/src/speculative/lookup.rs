//! Prompt lookup: drafts copied from earlier in the text.

use hearth_model::Result;

use super::Drafter;

/// Proposes what followed the most recent earlier occurrence of the text's last n tokens,
/// trying the longest n first. A longer match predicts better; a single token matches almost
/// anywhere and predicts little, so the shortest n tried is 2.
#[derive(Clone, Copy, Debug)]
pub struct PromptLookup {
    pub ngram_max: usize,
    pub ngram_min: usize,
}

impl Default for PromptLookup {
    fn default() -> Self {
        Self {
            ngram_max: 4,
            ngram_min: 2,
        }
    }
}

impl PromptLookup {
    /// The lookup itself, without the trait's `Result`.
    pub fn find(&self, tokens: &[u32], max: usize) -> Vec<u32> {
        if max == 0 {
            return Vec::new();
        }
        for n in (self.ngram_min.max(1)..=self.ngram_max).rev() {
            if tokens.len() <= n {
                continue;
            }
            let tail = &tokens[tokens.len() - n..];
            // Latest first: recent text predicts the next tokens best. The match must end
            // before the tail itself so that something follows it.
            let found = (0..tokens.len() - n)
                .rev()
                .find(|&start| &tokens[start..start + n] == tail);
            if let Some(start) = found {
                let from = start + n;
                let to = (from + max).min(tokens.len());
                return tokens[from..to].to_vec();
            }
        }
        Vec::new()
    }
}

impl Drafter for PromptLookup {
    fn propose(&mut self, tokens: &[u32], max: usize, _p_min: f32) -> Result<Vec<u32>> {
        Ok(self.find(tokens, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_longest_match() {
        let lookup = PromptLookup::default();
        // "1 2 3 4 5 | 9 2 3 4 7 | ... 2 3 4": the 3-gram "2 3 4" last occurred before 7.
        let text = [1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 6, 2, 3, 4];
        assert_eq!(lookup.find(&text, 3), vec![7, 8, 6]);
        // A 4-gram match wins over a later 3-gram one.
        let text = [1, 2, 3, 4, 5, 6, 0, 2, 3, 4, 9, 1, 2, 3, 4];
        assert_eq!(lookup.find(&text, 2), vec![5, 6]);
        // The draft stops at the end of the text.
        let text = [5, 6, 7, 5, 6];
        assert_eq!(lookup.find(&text, 10), vec![7, 5, 6]);
        // No match of two tokens or more: nothing.
        assert!(lookup.find(&[1, 2, 3, 4, 3], 5).is_empty());
        assert!(lookup.find(&[], 5).is_empty());
        assert!(lookup.find(&text, 0).is_empty());
    }
}
