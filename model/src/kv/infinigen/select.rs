//! Speculation and selection, the CPU reference of the `ig_*` kernels: approximate attention
//! scores from the partial query and partial keys, and the tokens worth fetching.

/// Scores of every history position for every query head: `scores[h * n + t]` =
/// scale * qp[h] . pk[t][h / group], soft-capped where `softcap` says (as the model's dense
/// attention scores), for `n` = pk.len() / (n_kv * r) positions.
pub fn speculate(
    qp: &[f32],
    pk: &[f32],
    n_head: usize,
    n_kv: usize,
    r: usize,
    scale: f32,
    softcap: Option<f32>,
) -> Vec<f32> {
    let group = n_head / n_kv;
    let n = pk.len() / (n_kv * r);
    let mut scores = vec![0f32; n_head * n];
    for h in 0..n_head {
        let q = &qp[h * r..][..r];
        let g = h / group;
        for t in 0..n {
            let k = &pk[(t * n_kv + g) * r..][..r];
            scores[h * n + t] = scale * q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>();
        }
    }
    if let Some(cap) = softcap {
        crate::ops::softcap(&mut scores, cap);
    }
    scores
}

/// How many tokens each KV head fetches: the mean over query heads of how many score within
/// `alpha` of their head's best (InfiniGen's count), at most `budget`, plus the `recent`
/// newest tokens, at most all `n`.
pub fn fetch_count(
    scores: &[f32],
    n: usize,
    n_head: usize,
    alpha: f32,
    budget: usize,
    recent: usize,
) -> usize {
    if n == 0 {
        return 0;
    }
    let total: usize = (0..n_head)
        .map(|h| {
            let row = &scores[h * n..][..n];
            let best = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            row.iter().filter(|&&s| s >= best - alpha).count()
        })
        .sum();
    (total.div_ceil(n_head).min(budget) + recent).min(n)
}

/// The `k` positions KV head `g` fetches, in ascending order: the `recent` newest, then those
/// whose score is closest to their head's best for some query head of the group (ties keep
/// the earlier position).
pub fn select(
    scores: &[f32],
    n: usize,
    n_head: usize,
    n_kv: usize,
    g: usize,
    k: usize,
    recent: usize,
) -> Vec<u32> {
    select_among(scores, n, n_head, n_kv, g, k, |t| t + recent >= n)
}

/// [`select`] where `is_recent(t)` says which entries are among the newest (once the pool
/// evicts, an entry's index is no longer its position).
pub fn select_among(
    scores: &[f32],
    n: usize,
    n_head: usize,
    n_kv: usize,
    g: usize,
    k: usize,
    is_recent: impl Fn(usize) -> bool,
) -> Vec<u32> {
    let mut m = relative_scores(scores, n, n_head, n_kv, g);
    for (t, mt) in m.iter_mut().enumerate() {
        if is_recent(t) {
            *mt = f32::INFINITY;
        }
    }
    let mut chosen: Vec<u32> = (0..n as u32).collect();
    if k < n {
        // Highest relative score first, earlier position first among equals.
        chosen.sort_by(|&a, &b| m[b as usize].total_cmp(&m[a as usize]).then(a.cmp(&b)));
        chosen.truncate(k);
        chosen.sort_unstable();
    }
    chosen
}

/// m[t] = max over the group's heads h of scores[h][t] - max_t' scores[h][t'] (<= 0).
fn relative_scores(scores: &[f32], n: usize, n_head: usize, n_kv: usize, g: usize) -> Vec<f32> {
    let group = n_head / n_kv;
    let mut m = vec![f32::NEG_INFINITY; n];
    for h in g * group..(g + 1) * group {
        let row = &scores[h * n..][..n];
        let best = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for (mt, &s) in m.iter_mut().zip(row) {
            *mt = mt.max(s - best);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_infinigen_and_keeps_the_best_per_group() {
        // Two query heads share KV head 0; 6 positions.
        let scores = [
            0.0, -1.0, -6.0, -3.0, -10.0, -4.5, // head 0: best at 0
            -9.0, -9.0, -9.0, -2.0, -1.0, -20.0, // head 1: best at 4 (-1)
        ];
        let n = 6;
        // Within 5 of the best: head 0 has 4 (0, 1, 3, 5), head 1 has 2 (3, 4): mean 3.
        assert_eq!(fetch_count(&scores, n, 2, 5.0, 6, 0), 3);
        assert_eq!(fetch_count(&scores, n, 2, 5.0, 2, 0), 2);
        // Within 7: head 0 has 5, head 1 has 2: mean 3.5 rounds up to 4.
        assert_eq!(fetch_count(&scores, n, 2, 7.0, 6, 0), 4);
        assert_eq!(fetch_count(&scores, n, 2, 0.5, 6, 0), 1);
        assert_eq!(fetch_count(&scores, n, 2, f32::INFINITY, 6, 0), 6);
        assert_eq!(fetch_count(&[], 0, 2, 5.0, 3, 0), 0);
        // Relative: head 0 [0,-1,-6,-3,-10,-4.5]; head 1 [-8,-8,-8,-1,0,-19].
        // m = [0, -1, -6, -1, 0, -4.5].
        assert_eq!(select(&scores, n, 2, 1, 0, 5, 0), vec![0, 1, 3, 4, 5]);
        assert_eq!(select(&scores, n, 2, 1, 0, 2, 0), vec![0, 4]);
        // 1 before 3 among equals.
        assert_eq!(select(&scores, n, 2, 1, 0, 3, 0), vec![0, 1, 4]);
        assert_eq!(select(&scores, n, 2, 1, 0, 6, 0), vec![0, 1, 2, 3, 4, 5]);
        assert!(select(&[], 0, 2, 1, 0, 3, 0).is_empty());
        // The two newest always, then the best: 0 and 4 (m = 0) take the remaining two.
        assert_eq!(fetch_count(&scores, n, 2, 0.5, 6, 2), 3);
        assert_eq!(select(&scores, n, 2, 1, 0, 4, 2), vec![0, 1, 4, 5]);
        assert_eq!(select(&scores, n, 2, 1, 0, 3, 2), vec![0, 4, 5]);
        assert_eq!(fetch_count(&scores, n, 2, 5.0, 6, 9), 6);
    }

    #[test]
    fn speculation_is_a_scaled_capped_dot_product() {
        // 2 heads, 1 KV head, r = 2 (scale 1/2), 2 positions.
        let qp = [1.0, 2.0, 3.0, 4.0];
        let pk = [1.0, 0.0, 0.0, 1.0];
        let s = speculate(&qp, &pk, 2, 1, 2, 0.5, None);
        assert_eq!(s, vec![0.5, 1.0, 1.5, 2.0]);
        // Capped at 1: tanh of each score.
        let capped = speculate(&qp, &pk, 2, 1, 2, 0.5, Some(1.0));
        for (c, v) in capped.iter().zip(&s) {
            assert!((c - v.tanh()).abs() < 1e-6, "{c} vs tanh({v})");
        }
    }
}
