//! A draft model: a second, smaller model (or the target's weights quantized lower) that
//! drafts greedily, with its own KV cache kept in step with the target's text.

use hearth_model::{Backend, Error, Logits, Result};

use super::Drafter;

/// Drafts by running `backend` greedily from the text so far. Its cache keeps the text it was
/// last fed; each proposal reuses the prefix it shares with the new text, so rejected drafts
/// cost one cut and the accepted ones are already there.
pub struct DraftModel {
    backend: Box<dyn Backend + Send>,
    /// The tokens the draft cache holds, position by position.
    cached: Vec<u32>,
}

impl DraftModel {
    /// Checks that the draft speaks the target's vocabulary: drafted ids are fed to the
    /// target as they are.
    pub fn new(backend: Box<dyn Backend + Send>, target_vocab: usize) -> Result<Self> {
        let n_vocab = backend.config().n_vocab;
        if n_vocab != target_vocab {
            return Err(Error::options(
                "draft",
                format!(
                    "the draft model has a vocabulary of {n_vocab} tokens and the target \
                     {target_vocab}; a draft model must share the target's tokenizer"
                ),
            ));
        }
        Ok(Self {
            backend,
            cached: Vec::new(),
        })
    }

    pub fn backend(&self) -> &dyn Backend {
        &*self.backend
    }
}

impl Drafter for DraftModel {
    fn propose(&mut self, tokens: &[u32], max: usize, p_min: f32) -> Result<Vec<u32>> {
        let n_ctx = self.backend.n_ctx();
        // The draft's context may be shorter than the target's: it then stops drafting.
        if tokens.is_empty() || tokens.len() + max > n_ctx || max == 0 {
            return Ok(Vec::new());
        }
        // Keep what the cache shares with the text; at least the last token runs again to
        // give the logits after it.
        let shared = self
            .cached
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1)
            .min(self.backend.len());
        self.backend.truncate(shared);
        let shared = self.backend.len();
        self.cached.truncate(shared);
        let mut logits = self.backend.forward(&tokens[shared..], Logits::Last)?;
        self.cached.extend_from_slice(&tokens[shared..]);

        let mut draft = Vec::with_capacity(max);
        loop {
            let (token, p) = most_likely(&logits);
            // An unsure draft is likely rejected, and costs the target a wider step.
            if p < p_min {
                break;
            }
            draft.push(token);
            if draft.len() == max {
                break;
            }
            logits = self.backend.forward(&[token], Logits::Last)?;
            self.cached.push(token);
        }
        Ok(draft)
    }
}

/// The argmax and its softmax probability (ties to the lower id, as the sampler's greedy
/// choice).
fn most_likely(logits: &[f32]) -> (u32, f32) {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    let max = logits[best];
    if !max.is_finite() {
        return (best as u32, 0.0);
    }
    let total: f64 = logits
        .iter()
        .filter(|l| !l.is_nan())
        .map(|&l| f64::from(l - max).exp())
        .sum();
    (best as u32, (1.0 / total) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_likely_gives_the_argmax_and_its_probability() {
        let (t, p) = most_likely(&[0.0, 2.0, 2.0, f32::NEG_INFINITY]);
        assert_eq!(t, 1);
        let want = (2f64.exp() / (1.0 + 2.0 * 2f64.exp())) as f32;
        assert!((p - want).abs() < 1e-6, "{p} vs {want}");
    }
}
