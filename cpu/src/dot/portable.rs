//! The kernels in plain Rust: every CPU runs them, and they define what the SIMD ones compute.

use super::LevelsRow;
use crate::act::ActRow;

pub(super) fn levels(w: LevelsRow, x: ActRow) -> f32 {
    let mut acc = [0f32; 2];
    let chunks = w.levels.chunks_exact(32).zip(x.q.chunks_exact(32));
    for (c, (lw, lx)) in chunks.enumerate() {
        for h in 0..2 {
            let sum: i32 = lw[16 * h..][..16]
                .iter()
                .zip(&lx[16 * h..][..16])
                .map(|(&a, &b)| i32::from(a) * i32::from(b))
                .sum();
            acc[h] += sum as f32 * (w.d[2 * c + h] * x.d[c]);
        }
    }
    acc[0] + acc[1]
}

/// A row of levels with f32 activations: each value dequantized, `level * d + m`, then
/// multiplied, over eight running sums.
pub(super) fn levels_f32(w: LevelsRow, x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let groups = w.levels.chunks_exact(16).zip(x.chunks_exact(16));
    for (g, (lw, lx)) in groups.enumerate() {
        let (d, m) = (w.d[g], w.m[g]);
        for (i, (&l, &x)) in lw.iter().zip(lx).enumerate() {
            acc[i % 8] += (f32::from(l) * d + m) * x;
        }
    }
    acc.iter().sum()
}

/// Dot product over eight running sums, which the compiler keeps in vector registers.
pub(super) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
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

/// `out += sum(w[p] * rows[p])` over rows of `out.len()` values, row by row.
pub(super) fn weighted_sum(w: &[f32], rows: &[f32], out: &mut [f32]) {
    for (&w, row) in w.iter().zip(rows.chunks_exact(out.len().max(1))) {
        for (o, &v) in out.iter_mut().zip(row) {
            *o += w * v;
        }
    }
}

/// `out[p] = q . rows[p]` over rows of `q.len()` values.
pub(super) fn dots(q: &[f32], rows: &[f32], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(rows.chunks_exact(q.len().max(1))) {
        *o = dot_f32(q, row);
    }
}

/// Dot product of a row of little-endian f16 weights with f32 activations.
pub(super) fn f16_dot(w: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (i, (b, &v)) in w.chunks_exact(2).zip(x).enumerate() {
        acc[i % 8] += half::f16::from_le_bytes([b[0], b[1]]).to_f32() * v;
    }
    acc.iter().sum()
}
