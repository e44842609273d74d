//! Stop strings for streamed text: decides, delta by delta, which generated text is safe to show
//! and where generation ends.
//!
//! Text that might be the start of a stop string is held back until the next deltas settle it,
//! so a stop string split across tokens (`"</"`, `"s"`, `">"`) never leaks out. The result does
//! not depend on how the text is cut into deltas: generation stops at the stop string that is
//! completed first, exactly as if the text arrived one character at a time.

/// What one [`StopStrings::push`] lets through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopDelta {
    /// Text that is safe to show now. When `stop` is set it ends just before the stop string.
    pub text: String,
    /// Which stop string ended the text: its index in the list given to [`StopStrings::new`].
    pub stop: Option<usize>,
}

/// Streaming stop-string matcher. Feed it each decoded delta with [`push`](Self::push), show
/// what it returns, end generation once a delta carries a `stop`, and call
/// [`finish`](Self::finish) when generation ends for another reason to flush held-back text.
#[derive(Clone, Debug)]
pub struct StopStrings {
    /// In the caller's order, so `StopDelta::stop` indexes the caller's list. Empty strings are
    /// kept for that reason but never match: they would stop before any text.
    stops: Vec<String>,
    /// The longest stop string, in bytes: no more than this minus one byte need be held.
    longest: usize,
    /// The tail of the text so far that could still begin a stop string.
    held: String,
    /// Set once a stop string has matched; every later push answers with it.
    hit: Option<usize>,
}

impl StopStrings {
    pub fn new(stops: Vec<String>) -> Self {
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        Self {
            stops,
            longest,
            held: String::new(),
            hit: None,
        }
    }

    /// Takes the next piece of generated text. Returns the text that can be shown now: all of
    /// it up to the first stop string if one has now completed, else all but a tail that could
    /// still grow into a stop string. After a stop, later pushes return no text and the same
    /// `stop`.
    pub fn push(&mut self, delta: &str) -> StopDelta {
        if self.hit.is_some() {
            return StopDelta {
                text: String::new(),
                stop: self.hit,
            };
        }
        let mut text = std::mem::take(&mut self.held);
        text.push_str(delta);
        if let Some((start, index)) = self.first_match(&text) {
            text.truncate(start);
            self.hit = Some(index);
            return StopDelta {
                text,
                stop: Some(index),
            };
        }
        let hold = self.hold_from(&text);
        self.held = text.split_off(hold);
        StopDelta { text, stop: None }
    }

    /// Ends the stream: returns the held-back text, which no stop string completed. Empty after
    /// a stop, since the text from the stop string on is not shown.
    pub fn finish(&mut self) -> String {
        if self.hit.is_some() {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    /// Whether a stop string has matched.
    pub fn is_stopped(&self) -> bool {
        self.hit.is_some()
    }

    /// The stop string that ends first in `text`, as `(byte offset where it starts, index)`.
    /// Ending first is what makes the answer independent of how text is split into deltas;
    /// among those ending at the same place the longest wins, so less of it could leak, then
    /// the one listed first. Any match here is new: `held` alone never contains one.
    fn first_match(&self, text: &str) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .enumerate()
            .filter(|(_, stop)| !stop.is_empty())
            .filter_map(|(index, stop)| {
                let start = text.find(stop.as_str())?;
                Some((start + stop.len(), start, index))
            })
            .min()
            .map(|(_, start, index)| (start, index))
    }

    /// Where the held-back tail of `text` starts: the first char boundary from which the rest
    /// of `text` is a prefix of some stop string, or `text.len()` if there is none. Text before
    /// it can never be part of a stop string, whatever comes next. Only the last
    /// `longest - 1` bytes can qualify, which bounds the work per delta.
    fn hold_from(&self, text: &str) -> usize {
        let first = text.len().saturating_sub(self.longest.saturating_sub(1));
        (first..text.len())
            .filter(|&at| text.is_char_boundary(at))
            .find(|&at| self.stops.iter().any(|stop| stop.starts_with(&text[at..])))
            .unwrap_or(text.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(list: &[&str]) -> StopStrings {
        StopStrings::new(list.iter().map(|s| s.to_string()).collect())
    }

    /// Feeds `deltas` and returns everything shown (finish included) and the stop hit.
    fn run(list: &[&str], deltas: &[&str]) -> (String, Option<usize>) {
        let mut matcher = stops(list);
        let mut shown = String::new();
        for delta in deltas {
            let out = matcher.push(delta);
            shown.push_str(&out.text);
            if out.stop.is_some() {
                assert!(matcher.is_stopped());
                assert_eq!(matcher.finish(), "");
                return (shown, out.stop);
            }
        }
        shown.push_str(&matcher.finish());
        (shown, None)
    }

    /// Every way to cut `text` at two char boundaries must give what one delta gives.
    fn assert_split_invariant(list: &[&str], text: &str) {
        let whole = run(list, &[text]);
        let bounds: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &a in &bounds {
            for &b in bounds.iter().filter(|&&b| b >= a) {
                let split = run(list, &[&text[..a], &text[a..b], &text[b..]]);
                assert_eq!(split, whole, "{list:?} on {text:?} cut at {a}, {b}");
            }
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(
            run(list, &chars),
            whole,
            "{list:?} on {text:?} char by char"
        );
    }

    #[test]
    fn without_stop_strings_text_passes_through() {
        let mut matcher = stops(&[]);
        let out = matcher.push("Hello, world");
        assert_eq!(out.text, "Hello, world");
        assert_eq!(out.stop, None);
        assert_eq!(matcher.finish(), "");
    }

    #[test]
    fn text_before_a_stop_string_is_shown_and_the_rest_dropped() {
        let mut matcher = stops(&["</s>"]);
        let out = matcher.push("Hello</s>world");
        assert_eq!(
            out,
            StopDelta {
                text: "Hello".into(),
                stop: Some(0)
            }
        );
        assert_eq!(matcher.push("more").text, "");
        assert_eq!(matcher.push("more").stop, Some(0));
        assert_eq!(matcher.finish(), "");
    }

    #[test]
    fn a_stop_string_split_across_deltas_is_held_back_then_dropped() {
        let mut matcher = stops(&["</s>"]);
        let texts: Vec<String> = ["Hi <", "/", "s", ">!"]
            .iter()
            .map(|d| matcher.push(d))
            .map(|out| out.text)
            .collect();
        assert_eq!(texts, vec!["Hi ", "", "", ""]);
        assert!(matcher.is_stopped());
    }

    #[test]
    fn a_false_start_is_released_once_resolved() {
        let mut matcher = stops(&["</s>"]);
        assert_eq!(matcher.push("a<").text, "a");
        assert_eq!(matcher.push("/").text, "");
        assert_eq!(matcher.push("b").text, "</b");
        assert_eq!(matcher.push("<").text, "");
        assert_eq!(matcher.finish(), "<");
    }

    #[test]
    fn overlapping_prefixes_restart_inside_held_text() {
        // "aaab": after "aaa" the match can only start at the second 'a'.
        assert_eq!(
            run(&["aab"], &["a", "a", "a", "b", "c"]),
            ("a".into(), Some(0))
        );
        assert_eq!(run(&["abab"], &["xab", "aba", "b"]), ("x".into(), Some(0)));
        assert_split_invariant(&["aab"], "aaaab");
        assert_split_invariant(&["abab"], "xabababab");
    }

    #[test]
    fn the_stop_string_completed_first_wins() {
        // "cd" completes before "abcde" does, so that is where generation would have stopped.
        assert_eq!(run(&["abcde", "cd"], &["abcde"]), ("ab".into(), Some(1)));
        // Both end at the same place: the longer one is cut, showing less.
        assert_eq!(run(&["de", "bcde"], &["abcde"]), ("a".into(), Some(1)));
        // Same string twice: the first listed.
        assert_eq!(run(&["x", "x"], &["axb"]), ("a".into(), Some(0)));
        assert_eq!(
            run(&["\n\n", "User:"], &["ok User:\n\n"]),
            ("ok ".into(), Some(1))
        );
        assert_split_invariant(&["abcde", "cd"], "xxabcdexx");
        assert_split_invariant(&["de", "bcde", "e"], "abcdef");
        assert_split_invariant(&["<|im_end|>", "<|endoftext|>"], "a <| b <|im<|endoftext|>");
    }

    #[test]
    fn held_back_text_is_flushed_by_finish() {
        let mut matcher = stops(&["###"]);
        assert_eq!(matcher.push("done ##").text, "done ");
        assert_eq!(matcher.finish(), "##");
        assert_eq!(run(&["###"], &["a#", "#"]), ("a##".into(), None));
    }

    #[test]
    fn multi_byte_text_is_held_back_at_char_boundaries() {
        let mut matcher = stops(&["日本語"]);
        assert_eq!(matcher.push("今日本").text, "今");
        assert_eq!(matcher.push("人").text, "日本人");
        let mut matcher = stops(&["日本語"]);
        assert_eq!(matcher.push("今日").text, "今");
        assert_eq!(matcher.push("本語です").text, "");
        assert!(matcher.is_stopped());

        // "é" and "è" share their first byte but not a char: nothing is held.
        assert_eq!(stops(&["é!"]).push("caè").text, "caè");
        assert_eq!(
            run(&["é!"], &["caf", "é", "!", "?"]),
            ("caf".into(), Some(0))
        );
        assert_split_invariant(&["é!", "🦀🦀"], "café 🦀 é🦀🦀!");
        assert_split_invariant(&["日本語"], "日本日本語");
    }

    #[test]
    fn empty_stop_strings_never_match() {
        assert_eq!(
            run(&["", "END"], &["abc", "EN", "D"]),
            ("abc".into(), Some(1))
        );
        assert_eq!(run(&[""], &["abc"]), ("abc".into(), None));
    }
}
