//! [`Distribution`]: the probabilities the sampling chain ends in
//! ([`Sampler::distribution`](crate::sample::Sampler::distribution)), which a drafted token is
//! verified against.

/// A probability distribution over a few tokens: what is left after the sampling chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    /// Token ids and their probabilities, which add up to 1; tokens not listed have none.
    pub probs: Vec<(u32, f64)>,
}

impl Distribution {
    /// All the probability on one token.
    pub fn certain(token: u32) -> Self {
        Self {
            probs: vec![(token, 1.0)],
        }
    }

    /// Normalises non-negative weights. With no weight at all, the first token (or token 0
    /// for none) gets everything, as the sampler's draw would give it.
    pub fn from_weights(weights: impl IntoIterator<Item = (u32, f64)>) -> Self {
        let mut probs: Vec<(u32, f64)> = weights.into_iter().filter(|&(_, w)| w > 0.0).collect();
        let total: f64 = probs.iter().map(|&(_, w)| w).sum();
        if probs.is_empty() || !total.is_finite() {
            return Self::certain(probs.first().map_or(0, |&(id, _)| id));
        }
        for (_, w) in &mut probs {
            *w /= total;
        }
        Self { probs }
    }

    /// The probability of `token`.
    pub fn prob(&self, token: u32) -> f64 {
        self.probs
            .iter()
            .find(|&&(id, _)| id == token)
            .map_or(0.0, |&(_, p)| p)
    }

    /// The token at cumulative probability `u` in [0, 1), in list order.
    pub fn pick(&self, u: f64) -> u32 {
        let mut cumulative = 0.0;
        for &(id, p) in &self.probs {
            cumulative += p;
            if u < cumulative {
                return id;
            }
        }
        // Rounding left `u` past the last sum: the last token.
        self.probs.last().map_or(0, |&(id, _)| id)
    }
}
