//! T5's relative position buckets: which learned bias a query-key score gets, by the
//! distance from the query to the key. Small distances each have a bucket; larger ones share
//! logarithmically wider buckets up to `max_distance`, past which all share the last. An
//! encoder spends half its buckets on keys after the query; a decoder sees none after it.

/// The bucket of `key - query` = `relative`, in f32 as transformers computes it (its
/// truncation decides the boundaries, so the arithmetic must match).
pub fn bucket(relative: i64, bidirectional: bool, buckets: usize, max_distance: usize) -> usize {
    let mut n = buckets as i64;
    let mut base = 0;
    let distance = if bidirectional {
        n /= 2;
        if relative > 0 {
            base = n;
        }
        relative.abs()
    } else {
        (-relative).max(0)
    };
    let exact = n / 2;
    if distance < exact {
        return (base + distance) as usize;
    }
    let ratio = (distance as f32 / exact as f32).ln() / (max_distance as f32 / exact as f32).ln();
    let large = exact + (ratio * (n - exact) as f32) as i64;
    (base + large.min(n - 1)) as usize
}

/// The bias of every (query, key) pair of one head ... for all heads: [n_head, queries,
/// keys], query i at position `q0 + i`, key j at position j; `table` is the file's
/// [buckets, n_head] (row per bucket).
pub fn bias(
    table: &[f32],
    n_head: usize,
    q0: usize,
    queries: usize,
    keys: usize,
    bidirectional: bool,
    max_distance: usize,
) -> Vec<f32> {
    let buckets = table.len() / n_head.max(1);
    let mut out = vec![0f32; n_head * queries * keys];
    for i in 0..queries {
        for j in 0..keys {
            let rel = j as i64 - (q0 + i) as i64;
            let b = bucket(rel, bidirectional, buckets, max_distance);
            for h in 0..n_head {
                out[(h * queries + i) * keys + j] = table[b * n_head + h];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_distances_have_their_own_bucket_and_far_ones_share() {
        // T5's 32 buckets, max distance 128.
        assert_eq!(bucket(0, true, 32, 128), 0);
        assert_eq!(bucket(-3, true, 32, 128), 3);
        assert_eq!(bucket(3, true, 32, 128), 19);
        assert_eq!(bucket(-1000, true, 32, 128), 15);
        assert_eq!(bucket(1000, true, 32, 128), 31);
        assert_eq!(bucket(5, false, 32, 128), 0);
        assert_eq!(bucket(-5, false, 32, 128), 5);
        assert_eq!(bucket(-1000, false, 32, 128), 31);
    }
}
