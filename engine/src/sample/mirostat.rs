//! Mirostat (Basu et al., 2021): sampling that steers the text's surprise (`-log2 p` of each
//! token drawn) towards a target `tau`, by truncating the distribution where the surprise
//! would run too high and moving that bound `mu` after every token by `eta` times the error.
//! Version 1 estimates the Zipf exponent of the distribution and derives a top-k from it;
//! version 2 cuts tokens whose own surprise passes `mu`. As llama.cpp's `mirostat` and
//! `mirostat_v2` samplers, which replace the rest of the chain after the penalties, and read
//! the distribution at the sampling temperature.

use super::filters::{sorted_probabilities, Candidate};

/// The top tokens version 1 estimates the Zipf exponent from (the paper's and llama.cpp's m).
const ESTIMATE_FROM: usize = 100;

/// One sequence's Mirostat state.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Mirostat {
    version: u8,
    tau: f32,
    eta: f32,
    /// The surprise bound, starting at twice the target.
    mu: f32,
}

impl Mirostat {
    /// The state for `version` 1 or 2; none for 0 (off) or any other value.
    pub fn new(version: u8, tau: f32, eta: f32) -> Option<Self> {
        matches!(version, 1 | 2).then_some(Self {
            version,
            tau,
            eta,
            mu: 2.0 * tau,
        })
    }

    /// Truncates `cands` as this version does at the current bound. `n_vocab` is the size of
    /// the whole vocabulary (version 1's estimate of k needs it). Kept candidates are left
    /// best first.
    pub fn truncate(&self, cands: &mut Vec<Candidate>, temperature: f32, n_vocab: usize) {
        if cands.len() <= 1 {
            return;
        }
        let probs = sorted_probabilities(cands, temperature);
        let keep = match self.version {
            1 => self.zipf_k(&probs, n_vocab),
            _ => probs
                .iter()
                .position(|&p| -p.log2() > f64::from(self.mu))
                .unwrap_or(probs.len()),
        };
        cands.truncate(keep.max(1));
    }

    /// Version 1's k: the Zipf exponent `s` fitted by least squares to the ratios of the top
    /// probabilities, then the k at which a Zipf distribution over the vocabulary has the
    /// surprise `mu`.
    fn zipf_k(&self, probs: &[f64], n_vocab: usize) -> usize {
        let (mut ti_bi, mut ti_sq) = (0.0, 0.0);
        for (i, pair) in probs.windows(2).take(ESTIMATE_FROM - 1).enumerate() {
            if pair[1] <= 0.0 {
                break;
            }
            let t = ((i + 2) as f64 / (i + 1) as f64).ln();
            ti_bi += t * (pair[0] / pair[1]).ln();
            ti_sq += t * t;
        }
        let s = ti_bi / ti_sq;
        let epsilon = s - 1.0;
        let k = (epsilon * 2f64.powf(f64::from(self.mu)) / (1.0 - (n_vocab as f64).powf(-epsilon)))
            .powf(1.0 / s);
        // A flat or degenerate head gives no estimate: the bound does not cut.
        if k.is_finite() && k >= 1.0 {
            (k as usize).min(probs.len())
        } else if k.is_finite() {
            1
        } else {
            probs.len()
        }
    }

    /// Moves the bound after a token of probability `p` (in the truncated distribution it
    /// was drawn from) was chosen.
    pub fn observe(&mut self, p: f64) {
        if p > 0.0 {
            let surprise = -p.log2() as f32;
            self.mu -= self.eta * (surprise - self.tau);
        }
    }

    #[cfg(test)]
    pub fn mu(&self) -> f32 {
        self.mu
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::filters::from_probabilities as cands;

    #[test]
    fn version_2_cuts_at_the_surprise_bound_and_moves_it() {
        // Surprises: 1, 2, 3, 3 bits.
        let probs = [0.5, 0.25, 0.125, 0.125];
        let mut m = Mirostat::new(2, 1.25, 0.5).unwrap();
        assert_eq!(m.mu(), 2.5);
        let mut c = cands(&probs);
        m.truncate(&mut c, 1.0, 4);
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 1]);
        // Drawing the second token (2/3 after truncation, 0.585 bits) lowers the error.
        m.observe(2.0 / 3.0);
        let want = 2.5 - 0.5 * ((1.5f64).log2() as f32 - 1.25);
        assert!((m.mu() - want).abs() < 1e-6, "{}", m.mu());
        // A bound below every surprise still keeps the best token.
        let mut low = Mirostat::new(2, 0.1, 0.1).unwrap();
        low.observe(1e-9);
        let mut c = cands(&probs);
        low.truncate(&mut c, 1.0, 4);
        assert_eq!(c.len(), 1);
        assert!(Mirostat::new(0, 5.0, 0.1).is_none());
        assert!(Mirostat::new(3, 5.0, 0.1).is_none());
    }

    /// An exact Zipf distribution p_i ∝ 1/i^s gives back s, and the k that puts the bound's
    /// surprise at the cut.
    #[test]
    fn version_1_fits_the_zipf_exponent() {
        let s = 1.2f64;
        let n = 1000;
        let raw: Vec<f64> = (1..=n).map(|i| 1.0 / (i as f64).powf(s)).collect();
        let total: f64 = raw.iter().sum();
        let probs: Vec<f64> = raw.iter().map(|p| p / total).collect();
        let m = Mirostat::new(1, 3.0, 0.1).unwrap();
        let epsilon = s - 1.0;
        let want = ((epsilon * 2f64.powf(6.0)) / (1.0 - (n as f64).powf(-epsilon))).powf(1.0 / s);
        assert_eq!(m.zipf_k(&probs, n), want as usize);
        let mut c = cands(&probs);
        m.truncate(&mut c, 1.0, n);
        assert_eq!(c.len(), want as usize);
    }
}
