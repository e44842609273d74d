//! The rule that decides on a drafted token: keep it, or replace it with a token drawn so
//! that the output follows the target's distribution whatever the draft proposed.

use super::{Acceptance, Distribution};

/// What the target made of one drafted token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The drafted token stands.
    Accepted,
    /// Rejected; this token takes its place, and the rest of the draft is dropped.
    Replaced(u32),
}

/// Decides on `drafted`, proposed from the draft distribution `q` where the target's is `p`,
/// with two uniform draws `u` and `u2` in [0, 1).
///
/// [`Acceptance::Exact`]: keep it with probability `min(1, p(d) / q(d))`; otherwise draw from
/// the residual `max(0, p - q)`, normalised. A token then comes out with probability
/// `q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) r(x) = p(x)`: the target's own
/// distribution. A drafter that picks its token outright has `q` all on it: the draft is kept
/// with probability `p(d)` and the residual is `p` without `d`. Under greedy decoding `p` is
/// all on the argmax, so the draft is kept exactly when it is the argmax, which replaces it.
///
/// [`Acceptance::TopPool`]: kept whenever `p` gives it any probability, i.e. it survived the
/// target's filters; otherwise the exact rule (whose acceptance is then 0).
pub fn verify(
    p: &Distribution,
    q: &Distribution,
    drafted: u32,
    acceptance: Acceptance,
    u: f64,
    u2: f64,
) -> Verdict {
    let p_d = p.prob(drafted);
    if acceptance == Acceptance::TopPool && p_d > 0.0 {
        return Verdict::Accepted;
    }
    let q_d = q.prob(drafted);
    // q_d == 0 means the drafter proposed a token it gives no probability, which no sampler
    // does; taking the ratio as infinite keeps the rule exact for p anyway.
    let keep = if q_d > 0.0 { (p_d / q_d).min(1.0) } else { 1.0 };
    if p_d > 0.0 && u < keep {
        return Verdict::Accepted;
    }
    let residual: Vec<(u32, f64)> = p
        .probs
        .iter()
        .map(|&(id, p_x)| (id, (p_x - q.prob(id)).max(0.0)))
        .filter(|&(_, w)| w > 0.0)
        .collect();
    // All of p under q (p <= q everywhere) leaves no residual; acceptance was then certain
    // unless p_d was 0, and p itself is the right fallback.
    let residual = if residual.is_empty() {
        p.clone()
    } else {
        Distribution::from_weights(residual)
    };
    Verdict::Replaced(residual.pick(u2))
}

#[cfg(test)]
mod tests {
    use rand::{rngs::StdRng, Rng, SeedableRng};

    use super::*;

    fn dist(probs: &[f64]) -> Distribution {
        Distribution::from_weights(probs.iter().enumerate().map(|(i, &p)| (i as u32, p)))
    }

    /// One speculative token: draft from q, verify against p. Returns the token emitted.
    fn one_token(p: &Distribution, q: &Distribution, rng: &mut StdRng) -> u32 {
        let drafted = q.pick(rng.gen());
        match verify(p, q, drafted, Acceptance::Exact, rng.gen(), rng.gen()) {
            Verdict::Accepted => drafted,
            Verdict::Replaced(t) => t,
        }
    }

    /// Pearson's chi-square statistic of `counts` against `expected` probabilities.
    fn chi_square(counts: &[usize], expected: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        counts
            .iter()
            .zip(expected)
            .filter(|(_, &e)| e > 0.0)
            .map(|(&c, &e)| {
                let want = e * n as f64;
                (c as f64 - want).powi(2) / want
            })
            .sum()
    }

    /// The emitted tokens follow p, not q, for a sampled draft and for a drafter that picks
    /// one token outright. 5 categories, 4 degrees of freedom: the 0.999 quantile of
    /// chi-square is 18.47; every draw is seeded, so the test is deterministic.
    #[test]
    fn accepted_and_replaced_tokens_follow_the_target() {
        let p = dist(&[0.5, 0.2, 0.15, 0.1, 0.05]);
        let drafts = [
            dist(&[0.1, 0.1, 0.2, 0.3, 0.3]),
            dist(&[0.5, 0.2, 0.15, 0.1, 0.05]),
            dist(&[0.0, 0.0, 0.0, 1.0, 0.0]),
            dist(&[0.9, 0.1, 0.0, 0.0, 0.0]),
        ];
        for (i, q) in drafts.iter().enumerate() {
            let mut rng = StdRng::seed_from_u64(40 + i as u64);
            let mut counts = [0usize; 5];
            for _ in 0..50_000 {
                counts[one_token(&p, q, &mut rng) as usize] += 1;
            }
            let expected: Vec<f64> = (0..5).map(|t| p.prob(t)).collect();
            let chi2 = chi_square(&counts, &expected);
            assert!(
                chi2 < 18.47,
                "draft {i}: chi-square {chi2}, counts {counts:?}"
            );
        }
        // The same test does see a wrong distribution: q itself fails it.
        let mut rng = StdRng::seed_from_u64(1);
        let mut counts = [0usize; 5];
        for _ in 0..50_000 {
            counts[drafts[0].pick(rng.gen()) as usize] += 1;
        }
        let expected: Vec<f64> = (0..5).map(|t| p.prob(t)).collect();
        assert!(chi_square(&counts, &expected) > 1000.0);
    }

    /// Greedy: kept exactly when it is the argmax, whatever the draws.
    #[test]
    fn greedy_keeps_only_the_argmax() {
        let p = Distribution::certain(3);
        for u in [0.0, 0.5, 0.999] {
            let q = Distribution::certain(3);
            assert_eq!(
                verify(&p, &q, 3, Acceptance::Exact, u, u),
                Verdict::Accepted
            );
            let q = Distribution::certain(1);
            assert_eq!(
                verify(&p, &q, 1, Acceptance::Exact, u, u),
                Verdict::Replaced(3)
            );
            assert_eq!(
                verify(&p, &q, 1, Acceptance::TopPool, u, u),
                Verdict::Replaced(3)
            );
        }
    }

    /// Inferflow's pool acceptance keeps any token the filters left, at any draw; a token
    /// outside the pool is replaced from p.
    #[test]
    fn pool_acceptance_keeps_whatever_survived_the_filters() {
        let p = Distribution::from_weights([(4, 0.7), (9, 0.3)]);
        let q = Distribution::certain(9);
        assert_eq!(
            verify(&p, &q, 9, Acceptance::TopPool, 0.99, 0.0),
            Verdict::Accepted
        );
        // The exact rule keeps it with probability 0.3 only.
        assert_eq!(
            verify(&p, &q, 9, Acceptance::Exact, 0.5, 0.0),
            Verdict::Replaced(4)
        );
        let q = Distribution::certain(2);
        assert!(matches!(
            verify(&p, &q, 2, Acceptance::TopPool, 0.0, 0.9),
            Verdict::Replaced(9)
        ));
    }
}
