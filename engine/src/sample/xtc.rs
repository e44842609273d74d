//! XTC, "exclude top choices": now and then, the most likely tokens are set aside so that a
//! less obvious one is drawn, for writing that does not always take the expected word. As
//! llama.cpp's `xtc` sampler: it acts on a draw below `probability`, and then removes every
//! token at least `threshold` likely except the least likely of them, so that a sensible
//! token always remains.

use super::filters::{sorted_probabilities, Candidate};

/// Applies XTC to `cands` (softmax at temperature 1 over them). `coin` is drawn (once) only
/// where XTC could act: `probability` above 0, `threshold` at most 0.5 (above it two tokens
/// cannot both pass), and at least two candidates. Kept candidates are left best first.
pub(super) fn xtc(
    cands: &mut Vec<Candidate>,
    probability: f32,
    threshold: f32,
    coin: impl FnOnce() -> f64,
) {
    if probability.is_nan() || probability <= 0.0 || threshold.is_nan() || threshold > 0.5 {
        return;
    }
    if cands.len() < 2 || coin() > f64::from(probability) {
        return;
    }
    let probs = sorted_probabilities(cands, 1.0);
    let above = probs
        .iter()
        .take_while(|&&p| p >= f64::from(threshold))
        .count();
    if above >= 2 {
        cands.drain(..above - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::filters::from_probabilities as cands;

    fn run(probs: &[f64], probability: f32, threshold: f32, coin: f64) -> Vec<u32> {
        let mut c = cands(probs);
        xtc(&mut c, probability, threshold, || coin);
        let mut ids: Vec<u32> = c.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids
    }

    /// llama.cpp's own cases (tests/test-sampling.cpp, `test_xtc`).
    #[test]
    fn llama_cpp_s_cases() {
        let probs = [0.4, 0.3, 0.2, 0.1];
        assert_eq!(run(&probs, 0.99, 0.09, 0.5), [3]);
        assert_eq!(run(&probs, 0.99, 0.19, 0.5), [2, 3]);
        assert_eq!(run(&probs, 0.99, 0.29, 0.5), [1, 2, 3]);
        assert_eq!(run(&probs, 0.99, 0.39, 0.5), [0, 1, 2, 3]);
    }

    #[test]
    fn the_top_choices_but_the_last_are_removed() {
        let probs = [0.1, 0.4, 0.3, 0.15, 0.05];
        // 0.4, 0.3 and 0.15 pass 0.12: the two likeliest go, 0.15 stays with the tail.
        assert_eq!(run(&probs, 1.0, 0.12, 0.5), [0, 3, 4]);
        // One token above the threshold: nothing to exclude.
        assert_eq!(run(&probs, 1.0, 0.35, 0.5), [0, 1, 2, 3, 4]);
        // The coin decides: above the probability, nothing happens.
        assert_eq!(run(&probs, 0.5, 0.12, 0.6), [0, 1, 2, 3, 4]);
        assert_eq!(run(&probs, 0.5, 0.12, 0.4), [0, 3, 4]);
        // A threshold above 0.5 never acts, and never draws.
        let mut c = cands(&probs);
        xtc(&mut c, 1.0, 0.6, || unreachable!("no draw"));
        xtc(&mut c, 0.0, 0.1, || unreachable!("no draw"));
        assert_eq!(c.len(), 5);
    }
}
