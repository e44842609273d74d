//! Two cuts of the distribution's tail by its shape rather than by rank or mass alone:
//! locally typical sampling and tail-free sampling. Both read the softmax at temperature 1
//! over the current candidates and keep at least one token; their edges follow llama.cpp's
//! samplers (`typical`, and `tail_free` as llama.cpp had it), so a setting means the same in
//! both.

use super::filters::{sorted_probabilities, Candidate};

/// Locally typical sampling (Meister et al., 2023): ranks tokens by how far their information
/// content `-ln p` lies from the distribution's entropy, and keeps the closest ones until
/// their probabilities add up to more than `p`. 1 or above (or NaN) keeps everything. The
/// kept candidates are left in that order.
pub(super) fn typical(cands: &mut Vec<Candidate>, p: f32) {
    if p.is_nan() || p >= 1.0 || cands.len() <= 1 {
        return;
    }
    let probs = sorted_probabilities(cands, 1.0);
    let entropy: f64 = probs
        .iter()
        .filter(|&&q| q > 0.0)
        .map(|&q| -q * q.ln())
        .sum();
    // An impossible token is infinitely far from typical.
    let distance = |q: f64| {
        if q > 0.0 {
            (-q.ln() - entropy).abs()
        } else {
            f64::INFINITY
        }
    };
    let mut order: Vec<usize> = (0..cands.len()).collect();
    // Stable over the best-first order: equal distances keep the likelier token first.
    order.sort_by(|&a, &b| distance(probs[a]).total_cmp(&distance(probs[b])));
    let mut cumulative = 0.0;
    let keep = order
        .iter()
        .position(|&i| {
            cumulative += probs[i];
            cumulative > f64::from(p)
        })
        .map_or(order.len(), |i| i + 1);
    *cands = order[..keep].iter().map(|&i| cands[i]).collect();
}

/// Tail-free sampling (Phillips, 2019): with the candidates sorted by probability, the
/// absolute second differences of the probabilities, normalised to sum to 1, mark where the
/// curve flattens into its tail; tokens are kept while their running sum stays at or below
/// `z`. 1 or above (or NaN) keeps everything. Kept candidates stay best first.
pub(super) fn tail_free(cands: &mut Vec<Candidate>, z: f32) {
    if z.is_nan() || z >= 1.0 || cands.len() <= 2 {
        return;
    }
    let probs = sorted_probabilities(cands, 1.0);
    let first: Vec<f64> = probs.windows(2).map(|w| w[0] - w[1]).collect();
    let mut second: Vec<f64> = first.windows(2).map(|w| (w[0] - w[1]).abs()).collect();
    let total: f64 = second.iter().sum();
    let n = second.len() as f64;
    for d in &mut second {
        // A flat distribution has no tail to find: every point weighs the same.
        *d = if total > 1e-6 { *d / total } else { 1.0 / n };
    }
    let mut cumulative = 0.0;
    if let Some(last) = second.iter().position(|&d| {
        cumulative += d;
        cumulative > f64::from(z)
    }) {
        cands.truncate(last.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::filters::from_probabilities as cands;

    fn ids(c: &[Candidate]) -> Vec<u32> {
        c.iter().map(|c| c.id).collect()
    }

    /// Worked by hand: probabilities 0.5, 0.3, 0.15, 0.05 have entropy 1.142 nats; their
    /// information contents are 0.693, 1.204, 1.897, 2.996, so the order by distance is 1
    /// (0.062), 0 (0.449), 2 (0.755), 3 (1.854), and the running sums 0.3, 0.8, 0.95, 1.
    #[test]
    fn typical_keeps_the_tokens_nearest_the_entropy() {
        let probs = [0.5, 0.3, 0.15, 0.05];
        let run = |p| {
            let mut c = cands(&probs);
            typical(&mut c, p);
            ids(&c)
        };
        assert_eq!(run(0.29), [1]);
        assert_eq!(run(0.31), [1, 0]);
        assert_eq!(run(0.79), [1, 0]);
        assert_eq!(run(0.81), [1, 0, 2]);
        assert_eq!(run(0.96), [1, 0, 2, 3]);
        assert_eq!(run(1.0), [0, 1, 2, 3]);
        // Always one token, even for p = 0.
        assert_eq!(run(0.0), [1]);
    }

    /// llama.cpp's own cases (tests/test-sampling.cpp, `test_typical`).
    #[test]
    fn typical_agrees_with_llama_cpp_s_cases() {
        let mut c = cands(&[0.97, 0.01, 0.01, 0.01]);
        typical(&mut c, 0.5);
        assert_eq!(ids(&c), [0]);
        let mut c = cands(&[0.4, 0.2, 0.2, 0.2]);
        typical(&mut c, 0.5);
        let mut kept = ids(&c);
        kept.sort_unstable();
        assert_eq!(kept, [1, 2, 3]);
    }

    /// Probabilities 0.4, 0.3, 0.2, 0.05, 0.05: first differences 0.1, 0.1, 0.15, 0; second
    /// 0, 0.05, 0.15, normalised 0, 0.25, 0.75. The sums pass 0.2 at index 1 and 0.9 at
    /// index 2.
    #[test]
    fn tail_free_cuts_where_the_curve_flattens() {
        let probs = [0.05, 0.4, 0.2, 0.3, 0.05];
        let run = |z| {
            let mut c = cands(&probs);
            tail_free(&mut c, z);
            ids(&c)
        };
        assert_eq!(run(0.2), [1]);
        assert_eq!(run(0.9), [1, 3]);
        assert_eq!(run(1.0), [0, 1, 2, 3, 4]);
        // A flat distribution: equal weights 1/3 each.
        let mut flat = cands(&[0.25; 5]);
        tail_free(&mut flat, 0.5);
        assert_eq!(flat.len(), 1);
    }
}
