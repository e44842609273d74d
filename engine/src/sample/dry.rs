//! DRY, "don't repeat yourself" (as llama.cpp's `dry` sampler and text-generation-webui's):
//! where the text's last tokens repeat an earlier passage, the token that followed that
//! passage is penalised, more steeply the longer the repeat, so that loops are broken while
//! short common phrases go free. A repeat never reaches back across a sequence breaker (a
//! newline, a colon, a quote or an asterisk by default), so that a name or a list's layout
//! can recur, and a breaker itself is never penalised.
//!
//! The repeats are found as llama.cpp finds them: the Z-algorithm over the window read
//! backwards gives, for every earlier position, how many tokens before it match the text's
//! end, in time linear in the window. A breaker is a token whose text holds one of the
//! breaker strings (llama.cpp also matches a breaker split across tokens; for the default
//! one-character breakers the two agree).

use std::collections::HashMap;

use super::filters::Candidate;

/// `ln(f32::MAX)`: the penalty's exponent is clamped so that `base^exponent` stays finite,
/// as llama.cpp clamps it.
const LN_F32_MAX: f32 = 88.722_84;

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
        let allowed = self.allowed_length.max(1);
        let n = history.len();
        if n <= allowed {
            return;
        }
        // A repeat reaches back at most to the latest breaker.
        let limit = history.iter().rev().position(|&t| breaker(t)).unwrap_or(n);
        if limit < allowed {
            return;
        }
        let backwards: Vec<u32> = history.iter().rev().copied().collect();
        let matches = z_array(&backwards);
        // For the match at k, the token that followed that earlier passage is k - 1 back.
        let mut longest: HashMap<u32, usize> = HashMap::new();
        for k in 1..n {
            let length = matches[k].min(limit);
            let token = backwards[k - 1];
            if length >= allowed && !breaker(token) {
                let l = longest.entry(token).or_default();
                *l = (*l).max(length);
            }
        }
        let max_exponent = if self.base > 1.000_001 {
            (LN_F32_MAX / self.base.ln()) as usize
        } else {
            usize::MAX
        };
        for (token, length) in longest {
            let exponent = (length - allowed).min(max_exponent) as i32;
            if let Some(c) = cands.get_mut(token as usize) {
                c.logit -= self.multiplier * self.base.powi(exponent);
            }
        }
    }
}

/// The Z-array of `s`: at each position, how long a prefix of `s` starts there (`s.len()` at
/// 0). Linear in `s`'s length.
fn z_array(s: &[u32]) -> Vec<usize> {
    let n = s.len();
    let mut z = vec![0; n];
    if n == 0 {
        return z;
    }
    z[0] = n;
    // [left, right) is the rightmost window known to match a prefix.
    let (mut left, mut right) = (0, 0);
    for k in 1..n {
        let mut length = if k < right {
            z[k - left].min(right - k)
        } else {
            0
        };
        while k + length < n && s[length] == s[k + length] {
            length += 1;
        }
        z[k] = length;
        if k + length > right {
            (left, right) = (k, k + length);
        }
    }
    z
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(n: u32) -> Vec<Candidate> {
        (0..n).map(|id| Candidate { id, logit: 0.0 }).collect()
    }

    /// Probabilities after DRY over a uniform vocabulary of `n` tokens.
    fn probs(dry: Dry, n: u32, history: &[u32], breakers: &[u32]) -> Vec<f32> {
        let mut c = vocab(n);
        dry.apply(&mut c, history, &|t| breakers.contains(&t));
        let total: f32 = c.iter().map(|c| c.logit.exp()).sum();
        c.iter().map(|c| c.logit.exp() / total).collect()
    }

    fn dry(multiplier: f32, allowed_length: usize) -> Dry {
        Dry {
            multiplier,
            base: 1.1,
            allowed_length,
        }
    }

    /// llama.cpp's own cases (tests/test-sampling.cpp, `test_dry`), within its tolerance.
    #[test]
    fn llama_cpp_s_cases() {
        let close = |got: Vec<f32>, want: &[f32]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
            }
        };
        close(probs(dry(1.0, 2), 4, &[0, 1], &[]), &[0.25; 4]);
        close(
            probs(dry(1.0, 2), 4, &[0, 1, 2, 0, 1], &[]),
            &[0.296923, 0.296923, 0.109232, 0.296923],
        );
        close(probs(dry(1.0, 2), 5, &[0, 1, 3, 4, 0, 1], &[3]), &[0.2; 5]);
        close(
            probs(dry(2.0, 2), 5, &[0, 1, 2, 0, 1], &[]),
            &[0.241818, 0.241818, 0.032727, 0.241818, 0.241818],
        );
        close(
            probs(dry(1.0, 4), 5, &[0, 1, 2, 3, 4, 0, 1], &[]),
            &[0.2; 5],
        );
    }

    #[test]
    fn the_longest_repeat_decides_and_grows_the_penalty() {
        // 1 2 3 4 ... 1 2 3: the text ends repeating "1 2 3", which 4 followed; "2 3" alone
        // was also followed by 6 once, a shorter repeat.
        let history = [1, 2, 3, 4, 2, 3, 6, 1, 2, 3];
        let mut c = vocab(8);
        let d = Dry {
            multiplier: 0.8,
            base: 1.75,
            allowed_length: 2,
        };
        d.apply(&mut c, &history, &|_| false);
        assert!((c[4].logit + 0.8 * 1.75).abs() < 1e-6, "{}", c[4].logit);
        assert!((c[6].logit + 0.8).abs() < 1e-6, "{}", c[6].logit);
        for id in [0, 1, 2, 3, 5, 7] {
            assert_eq!(c[id].logit, 0.0, "{id}");
        }
        // A breaker inside the text's end limits every repeat to what follows it.
        let mut c = vocab(8);
        d.apply(&mut c, &history, &|t| t == 1);
        assert!((c[4].logit + 0.8).abs() < 1e-6, "{}", c[4].logit);
    }

    #[test]
    fn the_z_array_is_the_naive_one() {
        let mut rng = 7u32;
        for len in [0, 1, 2, 5, 40, 200] {
            let s: Vec<u32> = (0..len)
                .map(|_| {
                    rng = rng.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (rng >> 16) % 3
                })
                .collect();
            let naive: Vec<usize> = (0..len)
                .map(|k| (0..len - k).take_while(|&j| s[j] == s[k + j]).count())
                .collect();
            assert_eq!(z_array(&s), naive, "{s:?}");
        }
    }

    #[test]
    fn a_long_loop_costs_linear_time_and_a_finite_penalty() {
        let history = vec![5u32; 200_000];
        let mut c = vocab(8);
        let huge = Dry {
            multiplier: 0.8,
            base: 10.0,
            allowed_length: 2,
        };
        huge.apply(&mut c, &history, &|_| false);
        assert!(c[5].logit.is_finite() && c[5].logit < -1e30);
    }
}
