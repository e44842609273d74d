//! The steps of the sampling chain, each a function on a list of candidates `(token id, logit)`:
//! penalties (repetition, presence, frequency), top-k, top-p, min-p, and the final draw from
//! the softmax. Their semantics follow llama.cpp's samplers so that the same settings mean the
//! same thing in both.
//!
//! Candidates never hold NaN logits (the caller maps NaN to -inf), and `rank_key` orders them
//! totally, ties going to the lower id: every step is deterministic, whatever the vocabulary.

/// One token still in the running.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Sort key that puts the best candidate first: higher logit, then lower id. One integer
/// compare instead of a float compare with a tie-break makes selecting and sorting 150k
/// candidates several times faster.
pub(super) fn rank_key(c: &Candidate) -> u64 {
    // -0.0 and 0.0 are the same logit: the same key, so the id decides between them.
    let bits = if c.logit == 0.0 { 0 } else { c.logit.to_bits() };
    // Floats order like sign-magnitude integers: inverting negatives and setting the sign bit
    // of positives gives unsigned integers in the floats' order (-inf lowest, +inf highest).
    let ascending = if bits >> 31 == 1 {
        !bits
    } else {
        bits | 1 << 31
    };
    (u64::from(!ascending) << 32) | u64::from(c.id)
}

/// The best candidate under `rank_key`, or `None` for an empty list.
pub(super) fn argmax(cands: &[Candidate]) -> Option<Candidate> {
    cands.iter().copied().min_by_key(rank_key)
}

/// The penalties on tokens seen recently, as llama.cpp's penalties sampler applies them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Penalties {
    /// CTRL-style: divides a positive logit, multiplies a non-positive one. 1 is off.
    pub repeat: f32,
    /// OpenAI's: subtracted once from every token that occurs. 0 is off.
    pub presence: f32,
    /// OpenAI's: subtracted once per occurrence. 0 is off.
    pub frequency: f32,
}

/// Penalises every distinct token in `recent`: the repetition penalty first (a penalty above 1
/// always makes the token less likely, since dividing a negative logit would make it more
/// likely), then `count * frequency + presence` subtracted, `count` being how often the token
/// occurs in `recent`.
///
/// `cands` must be the whole vocabulary in id order (`cands[id].id == id`), which is how the
/// chain starts; ids past its end are skipped, since the history is the caller's and may hold
/// tokens the model does not know. A repetition penalty that is not a positive finite number,
/// and presence or frequency penalties that are not finite, are ignored.
pub(super) fn penalties(cands: &mut [Candidate], recent: &[u32], p: Penalties) {
    let repeat = p.repeat > 0.0 && p.repeat.is_finite() && p.repeat != 1.0;
    let presence = if p.presence.is_finite() {
        p.presence
    } else {
        0.0
    };
    let frequency = if p.frequency.is_finite() {
        p.frequency
    } else {
        0.0
    };
    if recent.is_empty() || (!repeat && presence == 0.0 && frequency == 0.0) {
        return;
    }
    let mut sorted = recent.to_vec();
    sorted.sort_unstable();
    for run in sorted.chunk_by(|a, b| a == b) {
        let id = run[0];
        let Some(c) = cands.get_mut(id as usize) else {
            continue;
        };
        debug_assert_eq!(c.id, id, "the penalties run on the unfiltered vocabulary");
        if repeat {
            c.logit = if c.logit > 0.0 {
                c.logit / p.repeat
            } else {
                c.logit * p.repeat
            };
        }
        c.logit -= run.len() as f32 * frequency + presence;
    }
}

/// Keeps the `k` best candidates (in no particular order). `k == 0` keeps everything.
/// `select_nth_unstable` makes this O(vocab) rather than a sort of the whole vocabulary.
pub(super) fn top_k(cands: &mut Vec<Candidate>, k: usize) {
    if k == 0 || k >= cands.len() {
        return;
    }
    cands.select_nth_unstable_by_key(k - 1, rank_key);
    cands.truncate(k);
}

/// Top-p's first guess at the size of the nucleus. Nuclei of real models are usually this
/// small, and then one selection over the vocabulary and a sort of this many settle it.
const TOP_P_FIRST_GUESS: usize = 64;

/// Nucleus sampling: keeps the smallest set of best candidates whose probabilities (softmax at
/// temperature 1, over the current candidates) add up to at least `p`, and always at least one.
/// `p` of 1 or above (or NaN) keeps everything. The kept candidates are left in no particular
/// order.
///
/// Rather than sort the whole vocabulary, it bisects on the size of the set with
/// `select_nth_unstable`, which costs O(vocab) in all, and sorts only the last few candidates
/// to find the exact edge.
pub(super) fn top_p(cands: &mut Vec<Candidate>, p: f32) {
    if p.is_nan() || p >= 1.0 || cands.len() <= 1 {
        return;
    }
    let Some(best) = argmax(cands) else {
        return;
    };
    if best.logit == f32::NEG_INFINITY {
        // No candidate has any probability; there is nothing to rank them by.
        return;
    }
    let mass = |cands: &[Candidate]| -> f64 {
        cands
            .iter()
            .map(|c| f64::from(weight(c.logit, best.logit, 1.0)))
            .sum()
    };
    // Comparing unnormalised weights against p * total saves a division per candidate.
    let target = f64::from(p.max(0.0)) * mass(cands);

    // Invariant: cands[..lo] are the `lo` best candidates and weigh less than the target,
    // cands[lo..hi] are the next best, and the best `hi` reach the target (or hi is all).
    let (mut lo, mut lo_mass, mut hi) = (0, 0.0, cands.len());
    let mut mid = TOP_P_FIRST_GUESS;
    while hi - lo > TOP_P_FIRST_GUESS {
        cands[lo..hi].select_nth_unstable_by_key(mid - lo - 1, rank_key);
        let mid_mass = lo_mass + mass(&cands[lo..mid]);
        if mid_mass >= target {
            hi = mid;
        } else {
            (lo, lo_mass) = (mid, mid_mass);
        }
        mid = lo + (hi - lo) / 2;
    }
    cands[lo..hi].sort_unstable_by_key(rank_key);
    let mut cumulative = lo_mass;
    let last = cands[lo..hi].iter().position(|c| {
        cumulative += f64::from(weight(c.logit, best.logit, 1.0));
        cumulative >= target
    });
    // Summing in another order can leave the walk a hair short of the target; `hi` reached it.
    cands.truncate(last.map_or(hi, |i| lo + i + 1));
}

/// Keeps the candidates whose probability is at least `min_p` times the best one's. Works on
/// logits, as llama.cpp does: `p_i >= min_p * p_max` is `logit_i >= max_logit + ln(min_p)`,
/// the softmax's normaliser cancels, and no exp is needed. Order is preserved. `min_p` of 0
/// (or NaN) keeps everything; above 1 it is read as 1, which keeps the best tokens only.
pub(super) fn min_p(cands: &mut Vec<Candidate>, min_p: f32) {
    if min_p.is_nan() || min_p <= 0.0 || cands.len() <= 1 {
        return;
    }
    let Some(best) = argmax(cands) else {
        return;
    };
    let threshold = best.logit + min_p.min(1.0).ln();
    cands.retain(|c| c.logit >= threshold);
}

/// Draws a candidate from the softmax of `logit / temperature`, with `u` uniform in [0, 1).
/// `temperature` must be above 0 (the caller takes the greedy path otherwise). If no candidate
/// has any probability (all logits -inf) it returns the best by id, as greedy would; `None`
/// only for an empty list.
pub(super) fn sample_softmax(cands: &[Candidate], temperature: f32, u: f64) -> Option<u32> {
    let best = argmax(cands)?;
    if best.logit == f32::NEG_INFINITY {
        return Some(best.id);
    }
    let total: f64 = cands
        .iter()
        .map(|c| f64::from(weight(c.logit, best.logit, temperature)))
        .sum();
    let target = u * total;
    let mut cumulative = 0.0;
    for c in cands {
        cumulative += f64::from(weight(c.logit, best.logit, temperature));
        if target < cumulative {
            return Some(c.id);
        }
    }
    // Only reachable when rounding puts u * total at the very end of the range.
    Some(best.id)
}

/// Every candidate's unnormalised softmax weight at `temperature`, in list order: the
/// weights [`sample_softmax`] draws by.
pub(super) fn softmax_weights(cands: &[Candidate], temperature: f32) -> Vec<f64> {
    let Some(best) = argmax(cands) else {
        return Vec::new();
    };
    if best.logit == f32::NEG_INFINITY {
        return cands
            .iter()
            .map(|c| if c.id == best.id { 1.0 } else { 0.0 })
            .collect();
    }
    cands
        .iter()
        .map(|c| f64::from(weight(c.logit, best.logit, temperature)))
        .collect()
}

/// Sorts `cands` best first and returns their probabilities (softmax at `temperature`, over
/// the current candidates), in that order: what the samplers that read the distribution's
/// shape (typical, tail-free, XTC, mirostat, FSD) start from.
pub(super) fn sorted_probabilities(cands: &mut [Candidate], temperature: f32) -> Vec<f64> {
    cands.sort_unstable_by_key(rank_key);
    let mut weights = softmax_weights(cands, temperature);
    let total: f64 = weights.iter().sum();
    if total > 0.0 {
        for w in &mut weights {
            *w /= total;
        }
    }
    weights
}

/// Candidates in id order whose softmax is `probs`: logits `ln p`. What the tests of the
/// samplers that read the distribution's shape start from.
#[cfg(test)]
pub(super) fn from_probabilities(probs: &[f64]) -> Vec<Candidate> {
    probs
        .iter()
        .enumerate()
        .map(|(id, &p)| Candidate {
            id: id as u32,
            logit: p.ln() as f32,
        })
        .collect()
}

/// Unnormalised softmax weight `exp((logit - max) / temperature)`, in [0, 1]. `max` is the
/// largest logit and is not -inf. When it is +inf the limit is taken: the +inf tokens share
/// all the probability.
fn weight(logit: f32, max: f32, temperature: f32) -> f32 {
    if max == f32::INFINITY {
        return if logit == f32::INFINITY { 1.0 } else { 0.0 };
    }
    let w = ((logit - max) / temperature).exp();
    // -inf / inf is NaN; an unreachable token gets no weight whatever the temperature.
    if w.is_nan() {
        0.0
    } else {
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn cands(logits: &[f32]) -> Vec<Candidate> {
        logits
            .iter()
            .enumerate()
            .map(|(id, &logit)| Candidate {
                id: id as u32,
                logit,
            })
            .collect()
    }

    fn ids(cands: &[Candidate]) -> Vec<u32> {
        let mut ids: Vec<u32> = cands.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids
    }

    /// Logits whose softmax is exactly `probs` (up to rounding).
    fn logits_of(probs: &[f32]) -> Vec<f32> {
        probs.iter().map(|p| p.ln()).collect()
    }

    #[test]
    fn argmax_breaks_ties_by_lowest_id() {
        let c = cands(&[1.0, 3.0, -2.0, 3.0]);
        assert_eq!(argmax(&c).map(|c| c.id), Some(1));
        let c = cands(&[-0.0, 0.0]);
        assert_eq!(argmax(&c).map(|c| c.id), Some(0));
        assert_eq!(argmax(&[]), None);
    }

    #[test]
    fn top_k_keeps_the_k_best() {
        let mut c = cands(&[0.5, 4.0, 1.0, 3.0, 2.0, 3.0]);
        top_k(&mut c, 3);
        // Ties at 3.0 are both kept here; with k = 2 the lower id wins.
        assert_eq!(ids(&c), vec![1, 3, 5]);
        let mut c = cands(&[0.5, 4.0, 1.0, 3.0, 2.0, 3.0]);
        top_k(&mut c, 2);
        assert_eq!(ids(&c), vec![1, 3]);
        let mut c = cands(&[0.5, 4.0]);
        top_k(&mut c, 0);
        assert_eq!(c.len(), 2);
        top_k(&mut c, 10);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        let probs = [0.1, 0.4, 0.2, 0.3];
        for (p, expected) in [
            (0.0, vec![1]),
            (0.35, vec![1]),
            (0.5, vec![1, 3]),
            (0.75, vec![1, 2, 3]),
            (0.95, vec![0, 1, 2, 3]),
            (1.0, vec![0, 1, 2, 3]),
        ] {
            let mut c = cands(&logits_of(&probs));
            top_p(&mut c, p);
            assert_eq!(ids(&c), expected, "top_p {p}");
        }
    }

    /// The bisection must keep exactly the set a full sort would, for nuclei far smaller and
    /// far larger than its first guess.
    #[test]
    fn top_p_matches_a_full_sort_on_a_large_vocabulary() {
        let mut rng = StdRng::seed_from_u64(7);
        for (n, spread) in [
            (5_000, 0.2_f32),
            (5_000, 3.0),
            (5_000, 30.0),
            (300, 1.0),
            (70, 1.0),
        ] {
            let logits: Vec<f32> = (0..n).map(|_| rng.gen_range(-spread..spread)).collect();
            for p in [0.0, 0.1, 0.5, 0.9, 0.99] {
                let mut fast = cands(&logits);
                top_p(&mut fast, p);

                let mut sorted = cands(&logits);
                sorted.sort_by_key(rank_key);
                let max = f64::from(sorted[0].logit);
                let w: Vec<f64> = sorted
                    .iter()
                    .map(|c| (f64::from(c.logit) - max).exp())
                    .collect();
                let total: f64 = w.iter().sum();
                let mut cumulative = 0.0;
                let keep = w
                    .iter()
                    .position(|w| {
                        cumulative += w / total;
                        cumulative >= f64::from(p)
                    })
                    .map_or(n, |i| i + 1);
                // f32 weights against f64 ones may move the edge by a token, no more.
                assert!(
                    fast.len().abs_diff(keep) <= 1,
                    "n {n} spread {spread} p {p}: {} vs {keep}",
                    fast.len()
                );
                assert_eq!(ids(&fast), ids(&sorted[..fast.len()]), "n {n} p {p}");
            }
        }
    }

    #[test]
    fn min_p_keeps_tokens_above_a_fraction_of_the_best() {
        let probs = [0.05, 0.5, 0.3, 0.1, 0.03, 0.02];
        for (min, expected) in [
            (0.0, vec![0, 1, 2, 3, 4, 5]),
            (0.15, vec![1, 2, 3]),
            (0.5, vec![1, 2]),
            (0.9, vec![1]),
            (1.0, vec![1]),
            (2.0, vec![1]),
        ] {
            let mut c = cands(&logits_of(&probs));
            min_p(&mut c, min);
            assert_eq!(ids(&c), expected, "min_p {min}");
        }
    }

    fn repetition_penalty(c: &mut [Candidate], recent: &[u32], repeat: f32) {
        let p = Penalties {
            repeat,
            presence: 0.0,
            frequency: 0.0,
        };
        penalties(c, recent, p);
    }

    #[test]
    fn repetition_penalty_pushes_logits_towards_less_likely() {
        let mut c = cands(&[2.0, -2.0, 0.0, 1.0]);
        // Token 0 twice (penalised once), token 1 once, id 99 is outside the vocabulary.
        repetition_penalty(&mut c, &[0, 1, 0, 99], 2.0);
        let logits: Vec<f32> = c.iter().map(|c| c.logit).collect();
        assert_eq!(logits, vec![1.0, -4.0, 0.0, 1.0]);

        // Below 1 the penalty rewards repetition instead.
        let mut c = cands(&[2.0, -2.0]);
        repetition_penalty(&mut c, &[0, 1], 0.5);
        let logits: Vec<f32> = c.iter().map(|c| c.logit).collect();
        assert_eq!(logits, vec![4.0, -1.0]);

        for ignored in [1.0, 0.0, -1.0, f32::NAN, f32::INFINITY] {
            let mut c = cands(&[2.0, -2.0]);
            repetition_penalty(&mut c, &[0, 1], ignored);
            assert_eq!(c, cands(&[2.0, -2.0]), "penalty {ignored}");
        }
    }

    #[test]
    fn presence_and_frequency_penalties_subtract_per_token_and_per_occurrence() {
        let mut c = cands(&[2.0, -2.0, 0.5, 1.0]);
        let p = Penalties {
            repeat: 1.0,
            presence: 0.5,
            frequency: 0.25,
        };
        // Token 0 three times, token 1 once, token 2 never; id 99 is outside the vocabulary.
        penalties(&mut c, &[0, 1, 0, 99, 0], p);
        let logits: Vec<f32> = c.iter().map(|c| c.logit).collect();
        assert_eq!(logits, vec![2.0 - 0.75 - 0.5, -2.0 - 0.25 - 0.5, 0.5, 1.0]);

        // With the repetition penalty, it divides first and the others subtract after.
        let mut c = cands(&[2.0, -2.0]);
        let p = Penalties {
            repeat: 2.0,
            presence: 1.0,
            frequency: 1.0,
        };
        penalties(&mut c, &[0, 1, 1], p);
        let logits: Vec<f32> = c.iter().map(|c| c.logit).collect();
        assert_eq!(logits, vec![1.0 - 1.0 - 1.0, -4.0 - 2.0 - 1.0]);

        // Negative values reward what occurred; non-finite ones are off.
        let mut c = cands(&[0.0, 0.0]);
        let p = Penalties {
            repeat: 1.0,
            presence: -1.0,
            frequency: f32::NAN,
        };
        penalties(&mut c, &[1], p);
        assert_eq!(c, cands(&[0.0, 1.0]));
    }

    #[test]
    fn infinite_logits_share_the_probability() {
        let c = cands(&[f32::INFINITY, 5.0, f32::INFINITY]);
        for u in [0.0, 0.25, 0.49] {
            assert_eq!(sample_softmax(&c, 1.0, u), Some(0));
        }
        for u in [0.51, 0.75, 0.999] {
            assert_eq!(sample_softmax(&c, 1.0, u), Some(2));
        }
        let mut kept = c.clone();
        min_p(&mut kept, 0.1);
        assert_eq!(ids(&kept), vec![0, 2]);
        let mut kept = c.clone();
        top_p(&mut kept, 0.9);
        assert_eq!(ids(&kept), vec![0, 2]);
    }

    #[test]
    fn all_unreachable_picks_the_lowest_id() {
        let c = cands(&[f32::NEG_INFINITY; 4]);
        assert_eq!(sample_softmax(&c, 1.0, 0.7), Some(0));
        let mut kept = c.clone();
        top_p(&mut kept, 0.5);
        min_p(&mut kept, 0.5);
        assert_eq!(kept.len(), 4);
        assert_eq!(sample_softmax(&[], 1.0, 0.5), None);
    }

    #[test]
    fn infinite_temperature_ignores_unreachable_tokens() {
        let c = cands(&[f32::NEG_INFINITY, 1.0, 2.0]);
        for u in [0.0, 0.3, 0.6, 0.99] {
            assert_ne!(sample_softmax(&c, f32::INFINITY, u), Some(0));
        }
    }
}
