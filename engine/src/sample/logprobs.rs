//! Log probabilities of generated tokens, as OpenAI's `logprobs` reports them.
//!
//! They are the model's own distribution: the log-softmax of the raw logits, before the
//! penalties, filters and temperature shape the draw (vLLM's default too). So a token's
//! log probability says how likely the model found it, whatever sampling settings picked it,
//! and greedy and sampled runs report the same numbers for the same text.

use serde::Serialize;

use super::filters::{rank_key, Candidate};

/// Most alternatives a token may report (OpenAI's limit for `top_logprobs`).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One token and its log probability (natural log).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
}

/// A generated token's log probability and the most likely tokens at its place.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Logprobs {
    pub chosen: TokenLogprob,
    /// Best first (ties to the lower id); at most the number asked for.
    pub top: Vec<TokenLogprob>,
}

/// The log probabilities of `chosen` and of the `top` most likely tokens under `logits`. A
/// NaN logit counts as -inf; with no finite logit at all every log probability is -inf.
pub fn logprobs(logits: &[f32], chosen: u32, top: usize) -> Logprobs {
    let clean = |l: f32| if l.is_nan() { f32::NEG_INFINITY } else { l };
    let max = logits
        .iter()
        .copied()
        .map(clean)
        .fold(f32::NEG_INFINITY, f32::max);
    // log-sum-exp in f64: a 150k-token sum loses digits in f32.
    let lse = if max.is_finite() {
        let sum: f64 = logits
            .iter()
            .map(|&l| (f64::from(clean(l)) - f64::from(max)).exp())
            .sum();
        f64::from(max) + sum.ln()
    } else {
        f64::INFINITY
    };
    let logprob = |l: f32| (f64::from(clean(l)) - lse) as f32;
    let entry = |token: u32| TokenLogprob {
        token,
        logprob: logits
            .get(token as usize)
            .map_or(f32::NEG_INFINITY, |&l| logprob(l)),
    };

    // The best `top`, kept sorted while one pass goes over the vocabulary.
    let top = top.min(logits.len());
    let mut best: Vec<Candidate> = Vec::with_capacity(top + 1);
    if top > 0 {
        for (id, &l) in logits.iter().enumerate() {
            let c = Candidate {
                id: id as u32,
                logit: clean(l),
            };
            if best.len() == top && rank_key(&c) >= rank_key(&best[top - 1]) {
                continue;
            }
            let at = best.partition_point(|b| rank_key(b) < rank_key(&c));
            best.insert(at, c);
            best.truncate(top);
        }
    }
    Logprobs {
        chosen: entry(chosen),
        top: best.iter().map(|c| entry(c.id)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_of_the_logits() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, f32::NAN];
        let sum: f64 = [1.0f64, 3.0, 2.0, 3.0].iter().map(|l| l.exp()).sum();
        let expected = |l: f64| (l - sum.ln()) as f32;
        let lp = logprobs(&logits, 2, 3);
        assert_eq!(lp.chosen.token, 2);
        assert!((lp.chosen.logprob - expected(2.0)).abs() < 1e-6);
        // Best first, ties to the lower id; the NaN is never among them.
        let ids: Vec<u32> = lp.top.iter().map(|t| t.token).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        assert!((lp.top[0].logprob - expected(3.0)).abs() < 1e-6);
        let total: f32 = [0, 1, 2, 3]
            .iter()
            .map(|&t| logprobs(&logits, t, 0).chosen.logprob.exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6);
        assert_eq!(logprobs(&logits, 4, 0).chosen.logprob, f32::NEG_INFINITY);
    }

    #[test]
    fn asking_for_more_than_the_vocabulary_gives_all_of_it() {
        let lp = logprobs(&[0.0, 0.0], 0, 5);
        assert_eq!(lp.top.len(), 2);
        assert!((lp.top[1].logprob - 0.5f32.ln()).abs() < 1e-6);
        assert!(logprobs(&[0.0, 0.0], 0, 0).top.is_empty());
    }

    #[test]
    fn huge_logits_do_not_overflow() {
        let lp = logprobs(&[1e30, 0.0, f32::NEG_INFINITY], 0, 1);
        assert_eq!(lp.chosen.logprob, 0.0);
        let none = logprobs(&[f32::NEG_INFINITY; 3], 1, 1);
        assert_eq!(none.chosen.logprob, f32::NEG_INFINITY);
        // An id past the vocabulary has no probability.
        assert_eq!(logprobs(&[0.0], 7, 0).chosen.logprob, f32::NEG_INFINITY);
    }
}
