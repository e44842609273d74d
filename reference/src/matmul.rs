//! The reference's matrix products: split across cores and summed over several accumulators,
//! so that a few thousand tokens of perplexity take minutes, not hours.

/// y (n, m) = x (n, k) times w (m, k) transposed, rows of w split across cores.
pub(super) fn matmul(x: &[f32], w: &[f32], m: usize, k: usize) -> Vec<f32> {
    let n = x.len() / k;
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let rows_per = m.div_ceil(threads).max(1);
    // Each thread fills a slice of output columns for every token: out_t[r - r0, tok].
    let parts: Vec<Vec<f32>> = std::thread::scope(|s| {
        let jobs: Vec<_> = w
            .chunks(rows_per * k)
            .map(|wc| {
                s.spawn(move || {
                    let mut part = Vec::with_capacity(n * wc.len() / k);
                    for row in wc.chunks(k) {
                        for xt in x.chunks(k) {
                            part.push(dot(row, xt));
                        }
                    }
                    part
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("matmul thread panicked"))
            .collect()
    });
    let mut y = vec![0f32; n * m];
    let mut r = 0;
    for part in parts {
        for (i, chunk) in part.chunks(n).enumerate() {
            for (t, &v) in chunk.iter().enumerate() {
                y[t * m + r + i] = v;
            }
        }
        r += part.len() / n.max(1);
    }
    y
}

/// Dot product over eight running sums (which the compiler keeps in vector registers).
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, at) = a.split_at(a.len() / 8 * 8);
    let (bc, bt) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = at.iter().zip(bt).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

pub(super) fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
