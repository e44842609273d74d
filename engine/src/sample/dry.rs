//! DRY, "don't repeat yourself" (as llama.cpp's `dry` sampler and text-generation-webui's):
//! where the text's last tokens repeat an earlier passage, the token that followed that
//! passage is penalised, more steeply the longer the repeat, so that loops are broken while
//! short common phrases go free. A repeat never reaches back across a sequence breaker (a
//! newline, a colon, a quote or an asterisk by default), so that a name or a list's layout
//! can recur.

use super::filters::Candidate;

/// The longest repeat measured: its penalty is already far past any logit, and the cap keeps
/// a text of one token repeated from costing a quadratic scan.
const MAX_MATCH: usize = 64;

/// DRY's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Dry {
    /// The penalty of a repeat of exactly `allowed_length` tokens. 0 is off.
    pub multiplier: f32,
    /// How much steeper each further repeated token makes the penalty.
    pub base: f32,
    /// Repeats shorter than this are free.
    pub allowed_length: usize,
}

impl Dry {
    /// Penalises, in `cands` (the whole vocabulary in id order), every token that would
    /// extend a repeat of at least `allowed_length` tokens of `history` (the window DRY looks
    /// at): by `multiplier * base^(length - allowed_length)`, the longest repeat it extends
    /// deciding. `breaker` says whether a token is a sequence breaker.
    pub fn apply(&self, cands: &mut [Candidate], history: &[u32], breaker: &dyn Fn(u32) -> bool) {
        let off = !(self.multiplier > 0.0 && self.multiplier.is_finite());
        if off || self.base.is_nan() || self.base < 1.0 {
            return;
        }
        let n = history.len();
        let Some(&last) = history.last() else {
            return;
        };
        if breaker(last) {
            return;
        }
        // The longest repeat each token would extend: positions i whose preceding tokens
        // match the text's end; history[i] followed them.
        let mut longest: Vec<(u32, usize)> = Vec::new();
        for i in 1..n {
            if history[i - 1] != last {
                continue;
            }
            let mut length = 0;
            while length < i.min(MAX_MATCH) {
                let (earlier, recent) = (history[i - 1 - length], history[n - 1 - length]);
                if earlier != recent || breaker(recent) {
                    break;
                }
                length += 1;
            }
            if length >= self.allowed_length.max(1) {
                longest.push((history[i], length));
            }
        }
        longest.sort_unstable();
        for run in longest.chunk_by(|a, b| a.0 == b.0) {
            let (token, _) = run[0];
            let length = run.iter().map(|&(_, l)| l).max().unwrap_or(0);
            let exponent = (length - self.allowed_length.max(1)) as i32;
            let penalty = (self.multiplier * self.base.powi(exponent)).min(f32::MAX);
            if let Some(c) = cands.get_mut(token as usize) {
                c.logit -= penalty;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(n: u32) -> Vec<Candidate> {
        (0..n).map(|id| Candidate { id, logit: 0.0 }).collect()
    }

    const DRY: Dry = Dry {
        multiplier: 0.8,
        base: 1.75,
        allowed_length: 2,
    };

    #[test]
    fn the_token_that_would_extend_a_repeat_is_penalised() {
        // 1 2 3 4 ... 1 2 3: the text ends repeating "1 2 3", which 4 followed.
        let history = [1, 2, 3, 4, 5, 6, 1, 2, 3];
        let mut c = vocab(8);
        DRY.apply(&mut c, &history, &|_| false);
        let want = 0.8 * 1.75f32; // a repeat of 3, one past the allowed 2
        assert!((c[4].logit + want).abs() < 1e-6, "{}", c[4].logit);
        for id in [0, 1, 2, 3, 5, 6, 7] {
            assert_eq!(c[id].logit, 0.0, "{id}");
        }
        // A repeat shorter than the allowed length is free.
        let mut c = vocab(8);
        DRY.apply(&mut c, &[1, 4, 5, 1], &|_| false);
        assert!(c.iter().all(|c| c.logit == 0.0));
        // Exactly the allowed length: the multiplier itself.
        let mut c = vocab(8);
        DRY.apply(&mut c, &[1, 2, 7, 5, 1, 2], &|_| false);
        assert!((c[7].logit + 0.8).abs() < 1e-6);
    }

    #[test]
    fn breakers_stop_a_repeat() {
        // "3" breaks: the repeat "2 3 1 2" cannot reach back past it, leaving "1 2".
        let history = [2, 3, 1, 2, 6, 2, 3, 1, 2];
        let mut c = vocab(8);
        DRY.apply(&mut c, &history, &|t| t == 3);
        assert!((c[6].logit + 0.8).abs() < 1e-6, "{}", c[6].logit);
        let mut c = vocab(8);
        DRY.apply(&mut c, &history, &|_| false);
        assert!((c[6].logit + 0.8 * 1.75f32.powi(2)).abs() < 1e-5);
        // A text ending in a breaker repeats nothing.
        let mut c = vocab(8);
        DRY.apply(&mut c, &[1, 3, 5, 1, 3], &|t| t == 3);
        assert!(c.iter().all(|c| c.logit == 0.0));
    }

    #[test]
    fn a_long_loop_costs_a_bounded_scan_and_a_finite_penalty() {
        let history = vec![5u32; 20_000];
        let mut c = vocab(8);
        let huge = Dry { base: 10.0, ..DRY };
        huge.apply(&mut c, &history, &|_| false);
        assert!(c[5].logit.is_finite() && c[5].logit < -1e30);
    }
}
