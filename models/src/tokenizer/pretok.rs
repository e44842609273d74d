//! Pre-tokenizers for byte-level BPE: the regexes that cut text into words before BPE runs
//! on each word, selected by `tokenizer.ggml.pre`.
//!
//! The published patterns end in `\s+(?!\S)|\s+`, and the `regex` crate has no look-ahead.
//! We match the final alternative as a capture group `(\s+)` instead and, when that group
//! matched a run of two or more whitespace characters followed by a non-space, give the last
//! character back: exactly what the look-ahead does (it lets " world" keep its space).

use regex::Regex;

/// GPT-2's pattern.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|(\s+)";

/// Llama 3's pattern: case-insensitive contractions, numbers in groups of up to three,
/// newlines kept apart from other whitespace.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|(\s+)";

/// Qwen2's pattern (Qwen2.5, Qwen3): Llama 3's with every digit a word of its own.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|(\s+)";

/// GPT-4o's pattern (o200k, GPT-OSS): a word is a run of capitals then lower-case letters (or
/// the reverse) with a contraction kept on it, marks counting as letters either way; numbers
/// in groups of up to three; punctuation takes trailing newlines and slashes.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|(\s+)";

/// `tokenizer.ggml.pre` values this module implements.
pub(crate) const SUPPORTED: &[&str] = &[
    "default",
    "gpt-2",
    "smollm",
    "llama3",
    "llama-bpe",
    "llama-v3",
    "smaug-bpe",
    "dbrx",
    "falcon3",
    "pixtral",
    "qwen2",
    "deepseek-r1-qwen",
    "gpt-4o",
];

pub(crate) struct PreTokenizer {
    /// Split every numeric character into its own word first (Hugging Face's
    /// `Digits(individual_digits=true)`, llama.cpp's `\p{N}` pass).
    split_digits: bool,
    /// A word that is a token as a whole is that token, whatever the merges would make of it
    /// (Hugging Face's `ignore_merges`, which Llama 3's tokenizer sets; llama.cpp applies it
    /// to the names it gives that tokenizer).
    pub(crate) ignore_merges: bool,
    regex: Regex,
}

impl PreTokenizer {
    /// The pre-tokenizer named by `tokenizer.ggml.pre` (`None`: the key is absent, GPT-2),
    /// or `None` for a name this module does not implement.
    pub(crate) fn named(pre: Option<&str>) -> Option<Self> {
        let (split_digits, pattern) = match pre.unwrap_or("default") {
            "default" | "gpt-2" | "gpt2" => (false, GPT2),
            // SmolLM's tokenizer.json: Digits(individual_digits) then ByteLevel (GPT-2 regex).
            "smollm" => (true, GPT2),
            // The names llama.cpp gives Llama 3's pattern (its converter tells tokenizers apart
            // by a hash of their output, so Llama 3 derivatives get names of their own).
            "llama3" | "llama-bpe" | "llama-v3" | "smaug-bpe" | "dbrx" | "falcon3" | "pixtral" => {
                (false, LLAMA3)
            }
            "qwen2" | "deepseek-r1-qwen" => (false, QWEN2),
            "gpt-4o" => (false, GPT4O),
            _ => return None,
        };
        let ignore_merges = matches!(
            pre,
            Some("llama3" | "llama-bpe" | "llama-v3" | "falcon3" | "pixtral")
        );
        Some(PreTokenizer {
            split_digits,
            ignore_merges,
            // The patterns are constants that compile; a failure here is a bug caught by tests.
            regex: Regex::new(pattern).ok()?,
        })
    }

    /// Appends the words of `text` to `out`, in order; together they spell `text`.
    pub(crate) fn split<'t>(&self, text: &'t str, out: &mut Vec<&'t str>) {
        if !self.split_digits {
            return self.split_regex(text, out);
        }
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c.is_numeric() {
                self.split_regex(&text[start..i], out);
                out.push(&text[i..i + c.len_utf8()]);
                start = i + c.len_utf8();
            }
        }
        self.split_regex(&text[start..], out);
    }

    fn split_regex<'t>(&self, text: &'t str, out: &mut Vec<&'t str>) {
        let mut pos = 0;
        while pos < text.len() {
            let Some(caps) = self.regex.captures_at(text, pos) else {
                out.push(&text[pos..]);
                return;
            };
            let Some(m) = caps.get(0) else { return };
            if m.start() > pos {
                // Text no alternative matches stays a word of its own (the patterns above
                // match everything, so this is only defensive).
                out.push(&text[pos..m.start()]);
            }
            let mut end = m.end();
            if caps.get(1).is_some() && end < text.len() {
                // The emulated `\s+(?!\S)`: leave the last whitespace character for the next
                // word when the run is followed by a non-space and has more than one char.
                if let Some(last) = text[m.start()..end].chars().next_back() {
                    if end - last.len_utf8() > m.start() {
                        end -= last.len_utf8();
                    }
                }
            }
            out.push(&text[m.start()..end]);
            pos = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        split_with(&PreTokenizer::named(Some(pre)).unwrap(), text)
    }

    fn split_with(p: &PreTokenizer, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        p.split(text, &mut out);
        assert_eq!(out.concat(), text);
        out.into_iter().map(String::from).collect()
    }

    #[test]
    fn gpt2_keeps_the_space_with_the_next_word() {
        assert_eq!(
            words("gpt-2", "Hello  world's 42\n\n  x  "),
            ["Hello", " ", " world", "'s", " 42", "\n\n ", " x", "  "]
        );
    }

    #[test]
    fn smollm_isolates_digits() {
        assert_eq!(
            words("smollm", "pi 3.14!"),
            ["pi", " ", "3", ".", "1", "4", "!"]
        );
    }

    #[test]
    fn llama3_groups_digits_and_newlines() {
        assert_eq!(
            words("llama3", "I'LL pay 12345\n\n  now"),
            ["I", "'LL", " pay", " ", "123", "45", "\n\n", " ", " now"]
        );
    }

    /// Checked against Python's `regex` module running the pattern with its look-ahead.
    #[test]
    fn gpt4o_keeps_contractions_and_cases_together() {
        assert_eq!(
            words("gpt-4o", "HelloWorld I'LL pay 12345\n\n  now/then!\n"),
            [
                "Hello", "World", " I'LL", " pay", " ", "123", "45", "\n\n", " ", " now", "/then",
                "!\n"
            ]
        );
        assert_eq!(
            words("gpt-4o", "élan CAFÉs  x"),
            ["élan", " CAFÉs", " ", " x"]
        );
    }

    /// Words recorded from Hugging Face's pre-tokenizers with the original look-ahead
    /// patterns (models/scripts/make_tokenizer_fixtures.py).
    #[test]
    fn words_match_the_reference() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/pretokenize.json")).unwrap();
        let fixture = fixture.as_object().unwrap();
        assert_eq!(fixture.len(), 3);
        for (name, cases) in fixture {
            // Built once per name: compiling the Unicode classes is slow in debug builds.
            let pre = PreTokenizer::named(Some(name)).unwrap();
            for case in cases.as_array().unwrap() {
                let text = case["text"].as_str().unwrap();
                let expected: Vec<&str> = case["words"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|w| w.as_str().unwrap())
                    .collect();
                assert_eq!(split_with(&pre, text), expected, "{name}: {text:?}");
            }
        }
    }

    #[test]
    fn every_supported_name_builds() {
        for name in SUPPORTED {
            assert!(PreTokenizer::named(Some(name)).is_some(), "{name}");
        }
        assert!(PreTokenizer::named(Some("no-such")).is_none());
    }
}
