//! Frustratingly simple decoding (FSD; Yang et al., 2023, listed by the Inferflow report): a
//! deterministic decoder that contrasts the model with an "anti-LM" built from the text so
//! far. Among the model's `k` likeliest tokens it picks the one with the highest
//! `(1 - alpha) * p(token) - alpha * p_anti(token)`, so that a token the text has already
//! used in this context loses to a fresh one of similar likelihood: greedy decoding's
//! repetition without a blanket penalty.
//!
//! The anti-LM is an n-gram model of the prompt and the generated tokens: the likelihood of a
//! token after the last `n - 1` tokens, as counted in the text; where that context never
//! occurred before, the next shorter one (down to one token); where no context occurred,
//! no token is penalised.
//!
//! Randomized FSD draws the first tokens by sampling (for diverse openings) and decodes by
//! FSD after them ([`SamplerParams::fsd_sample_steps`](super::SamplerParams)).

use std::collections::HashMap;

use super::filters::{sorted_probabilities, Candidate};

/// FSD's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Fsd {
    /// The anti-LM's weight, in (0, 1].
    pub alpha: f32,
    /// How many of the model's likeliest tokens compete.
    pub k: usize,
    /// The anti-LM's order: contexts of up to `n - 1` tokens.
    pub n: usize,
}

impl Fsd {
    /// The FSD token among `cands` (the model's scores after bias and penalties, read at
    /// temperature 1), given the text so far; `None` for no candidate with any probability.
    /// Ties go to the likelier token.
    pub fn choose(&self, cands: &mut [Candidate], history: &[u32]) -> Option<u32> {
        let probs = sorted_probabilities(cands, 1.0);
        let anti = anti_lm(history, self.n);
        let alpha = f64::from(self.alpha);
        let mut best: Option<(f64, u32)> = None;
        for (c, &p) in cands.iter().zip(&probs).take(self.k.max(1)) {
            if p <= 0.0 {
                break;
            }
            let p_anti = anti.get(&c.id).copied().unwrap_or(0.0);
            let score = (1.0 - alpha) * p - alpha * p_anti;
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, c.id));
            }
        }
        best.map(|(_, id)| id)
    }
}

/// The anti-LM's distribution of the next token: what followed the longest context (of at
/// most `n - 1` tokens) ending the text that occurred before in it.
fn anti_lm(history: &[u32], n: usize) -> HashMap<u32, f64> {
    let len = history.len();
    for order in (1..n.min(len + 1)).rev() {
        let context = &history[len - order..];
        let mut next: HashMap<u32, f64> = HashMap::new();
        let mut total = 0.0;
        for start in 0..len - order {
            if &history[start..start + order] == context {
                *next.entry(history[start + order]).or_default() += 1.0;
                total += 1.0;
            }
        }
        if total > 0.0 {
            next.values_mut().for_each(|count| *count /= total);
            return next;
        }
    }
    HashMap::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::filters::from_probabilities as cands;

    #[test]
    fn the_anti_lm_backs_off_to_shorter_contexts() {
        // After "1 2", 3 followed twice and 4 once.
        let h = [1, 2, 3, 9, 1, 2, 3, 1, 2, 4, 1, 2];
        let anti = anti_lm(&h, 3);
        assert!((anti[&3] - 2.0 / 3.0).abs() < 1e-12 && (anti[&4] - 1.0 / 3.0).abs() < 1e-12);
        // "7 2" never occurred; "2" did: followed by 3, 3 and 4.
        let h = [1, 2, 3, 1, 2, 3, 1, 2, 4, 7, 2];
        let anti = anti_lm(&h, 3);
        assert_eq!(anti.len(), 2);
        assert!((anti[&3] - 2.0 / 3.0).abs() < 1e-12);
        // No context ever seen: nothing penalised.
        assert!(anti_lm(&[1, 2, 3], 3).is_empty());
        assert!(anti_lm(&[], 3).is_empty());
    }

    #[test]
    fn a_repeated_continuation_loses_to_a_fresh_one() {
        // The model prefers 3 (0.5) over 4 (0.4); the text has always followed "1 2" by 3.
        let probs = [0.0, 0.05, 0.05, 0.5, 0.4];
        let h = [1, 2, 3, 1, 2, 3, 1, 2];
        let fsd = |alpha| Fsd { alpha, k: 4, n: 3 }.choose(&mut cands(&probs), &h);
        // (1 - a) 0.5 - a > (1 - a) 0.4 only while a < 0.091.
        assert_eq!(fsd(0.05), Some(3));
        assert_eq!(fsd(0.2), Some(4));
        // Only the k likeliest compete.
        let only_best = Fsd {
            alpha: 0.9,
            k: 1,
            n: 3,
        };
        assert_eq!(only_best.choose(&mut cands(&probs), &h), Some(3));
    }
}
