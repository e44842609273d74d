//! Beam search: the choice of beams from each step's logits, apart from how a model keeps
//! the beams' KV caches (`crate::beam_search` has the drivers).
//!
//! As in common implementations (Hugging Face's `BeamSearchScorer`): each step ranks the
//! 2W best continuations over all beams by total log-probability; an end-of-generation token
//! among the first W closes a hypothesis, scored by log-probability / length^length_penalty,
//! and the best W others become the next beams. Search ends when W hypotheses are closed and
//! (with `early_stopping`) at once, or (without) when no running beam can beat the worst of
//! them; or after `max_tokens` tokens.

use hearth_model::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BeamParams {
    /// Beams kept at each step (W).
    pub width: usize,
    /// Most tokens generated.
    pub max_tokens: usize,
    /// Exponent of the length in the score: above 0 favours longer hypotheses.
    pub length_penalty: f32,
    /// Stop as soon as W hypotheses are closed.
    pub early_stopping: bool,
}

impl Default for BeamParams {
    fn default() -> Self {
        Self {
            width: 4,
            max_tokens: 64,
            length_penalty: 1.0,
            early_stopping: false,
        }
    }
}

impl BeamParams {
    pub fn validate(&self) -> Result<()> {
        if self.width == 0 {
            return Err(Error::options("beams", "must be at least 1"));
        }
        if !self.length_penalty.is_finite() {
            return Err(Error::options("length_penalty", "must be a finite number"));
        }
        Ok(())
    }
}

/// A running beam: the tokens generated so far and their total log-probability.
#[derive(Clone, Debug, PartialEq)]
pub struct Beam {
    pub tokens: Vec<u32>,
    pub logprob: f64,
}

/// A finished hypothesis, best first in results.
#[derive(Clone, Debug, PartialEq)]
pub struct Hypothesis {
    /// Generated tokens, the closing end-of-generation token included.
    pub tokens: Vec<u32>,
    pub logprob: f64,
    /// logprob / len^length_penalty.
    pub score: f64,
}

/// Where a new beam comes from: the index of the beam it extends and its new token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BeamChoice {
    pub parent: usize,
    pub token: u32,
}

pub struct BeamSearch {
    params: BeamParams,
    beams: Vec<Beam>,
    finished: Vec<Hypothesis>,
    done: bool,
}

impl BeamSearch {
    /// A search with one empty beam (the prompt).
    pub fn new(params: BeamParams) -> Self {
        Self {
            params,
            beams: vec![Beam {
                tokens: Vec::new(),
                logprob: 0.0,
            }],
            finished: Vec::new(),
            done: params.max_tokens == 0,
        }
    }

    pub fn beams(&self) -> &[Beam] {
        &self.beams
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    fn score(&self, logprob: f64, len: usize) -> f64 {
        logprob / (len.max(1) as f64).powf(self.params.length_penalty as f64)
    }

    /// Takes the logits of every running beam (in `beams()` order) and chooses the next
    /// beams; returns where each comes from.
    pub fn advance(
        &mut self,
        logits: &[Vec<f32>],
        is_eos: impl Fn(u32) -> bool,
    ) -> Vec<BeamChoice> {
        let w = self.params.width;
        // The 2W best (beam, token) continuations over all beams; ties go to the lower beam,
        // then the lower token id.
        let mut candidates: Vec<(f64, usize, u32)> = Vec::new();
        for (b, (beam, row)) in self.beams.iter().zip(logits).enumerate() {
            let lp = log_softmax(row);
            let mut best: Vec<u32> = (0..lp.len() as u32).collect();
            let keep = (2 * w).min(best.len());
            best.select_nth_unstable_by(keep.saturating_sub(1), |&a, &c| {
                lp[c as usize].total_cmp(&lp[a as usize]).then(a.cmp(&c))
            });
            best.truncate(keep);
            candidates.extend(best.iter().map(|&t| (beam.logprob + lp[t as usize], b, t)));
        }
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        candidates.truncate(2 * w);

        let mut next = Vec::with_capacity(w);
        let mut choices = Vec::with_capacity(w);
        for (rank, &(logprob, b, t)) in candidates.iter().enumerate() {
            if is_eos(t) {
                if rank < w {
                    let mut tokens = self.beams[b].tokens.clone();
                    tokens.push(t);
                    let score = self.score(logprob, tokens.len());
                    self.add_finished(Hypothesis {
                        tokens,
                        logprob,
                        score,
                    });
                }
                continue;
            }
            let mut tokens = self.beams[b].tokens.clone();
            tokens.push(t);
            next.push(Beam { tokens, logprob });
            choices.push(BeamChoice {
                parent: b,
                token: t,
            });
            if next.len() == w {
                break;
            }
        }
        self.beams = next;
        let len = self.beams.first().map_or(0, |b| b.tokens.len());
        if self.beams.is_empty() || len >= self.params.max_tokens {
            self.done = true;
        } else if self.finished.len() >= w {
            let worst = self
                .finished
                .iter()
                .map(|h| h.score)
                .fold(f64::INFINITY, f64::min);
            let best_running = self.score(self.beams[0].logprob, len);
            self.done = self.params.early_stopping || worst >= best_running;
        }
        choices
    }

    fn add_finished(&mut self, h: Hypothesis) {
        self.finished.push(h);
        self.finished.sort_by(|a, b| b.score.total_cmp(&a.score));
        self.finished.truncate(self.params.width);
    }

    /// The best hypotheses, best first: the closed ones, topped up with running beams when
    /// fewer than W closed.
    pub fn finish(mut self) -> Vec<Hypothesis> {
        let w = self.params.width;
        for beam in std::mem::take(&mut self.beams) {
            if self.finished.len() >= w {
                break;
            }
            let score = self.score(beam.logprob, beam.tokens.len());
            self.finished.push(Hypothesis {
                tokens: beam.tokens,
                logprob: beam.logprob,
                score,
            });
        }
        self.finished.sort_by(|a, b| b.score.total_cmp(&a.score));
        self.finished.truncate(w);
        self.finished
    }
}

/// log(softmax(x)) in f64.
fn log_softmax(x: &[f32]) -> Vec<f64> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = x.iter().map(|&v| (v as f64 - max).exp()).sum();
    let log_sum = sum.ln() + max;
    x.iter().map(|&v| v as f64 - log_sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(probs: &[f32]) -> Vec<f32> {
        probs.iter().map(|p| p.ln()).collect()
    }

    #[test]
    fn width_one_is_greedy() {
        let mut s = BeamSearch::new(BeamParams {
            width: 1,
            max_tokens: 3,
            ..BeamParams::default()
        });
        for step in [[0.1, 0.6, 0.3], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6]] {
            let c = s.advance(&[logits(&step)], |_| false);
            assert_eq!(c.len(), 1);
        }
        assert!(s.is_done());
        let h = s.finish();
        assert_eq!(h[0].tokens, [1, 0, 2]);
    }

    #[test]
    fn a_less_likely_first_token_wins_when_its_continuation_is_better() {
        // Greedy takes token 0 (0.5) then at best 0.4; token 1 (0.4) leads to 0.9.
        let mut s = BeamSearch::new(BeamParams {
            width: 2,
            max_tokens: 2,
            length_penalty: 0.0,
            early_stopping: false,
        });
        let c = s.advance(&[logits(&[0.5, 0.4, 0.1])], |_| false);
        assert_eq!(
            c,
            [
                BeamChoice {
                    parent: 0,
                    token: 0
                },
                BeamChoice {
                    parent: 0,
                    token: 1
                }
            ]
        );
        let c = s.advance(
            &[logits(&[0.3, 0.3, 0.4]), logits(&[0.05, 0.9, 0.05])],
            |_| false,
        );
        assert_eq!(
            c[0],
            BeamChoice {
                parent: 1,
                token: 1
            }
        );
        let h = s.finish();
        assert_eq!(h[0].tokens, [1, 1]);
        assert!((h[0].logprob - (0.4f64 * 0.9).ln()).abs() < 1e-6);
    }

    #[test]
    fn end_of_generation_closes_hypotheses_and_stops_early() {
        let eos = 2;
        let mut s = BeamSearch::new(BeamParams {
            width: 2,
            max_tokens: 10,
            length_penalty: 1.0,
            early_stopping: true,
        });
        s.advance(&[logits(&[0.45, 0.1, 0.45])], |t| t == eos);
        assert_eq!(s.beams().len(), 2);
        assert!(!s.is_done());
        s.advance(&[logits(&[0.1, 0.1, 0.8]), logits(&[0.1, 0.1, 0.8])], |t| {
            t == eos
        });
        assert!(s.is_done(), "two closed hypotheses with early stopping");
        let h = s.finish();
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].tokens.last(), Some(&eos));
    }
}
