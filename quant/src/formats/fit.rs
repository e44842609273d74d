//! Choosing a block's scale, base and levels: the quantizers every block format shares.
//!
//! Formats differ only in how many levels they have and how they pack them, so the choice of
//! `d`, `m` and the levels `q` lives here once, parameterised by the level count, and each
//! format module packs the result.
//!
//! Levels are always assigned with the f16-rounded `d` and `m` the block stores, so a stored
//! block is self-consistent: each value sits at the level nearest to it (clamped to the level
//! range), computed as `(w - m) * (1 / d)` in f32 and rounded to nearest, ties to even. The
//! error a candidate is judged by is the error of the block as stored.
//!
//! [`Rounding::Search`] tries grids of a few widths, each anchored at the minimum, the maximum
//! and the centre of the block; each grid's levels get the least-squares `d` and `m`, which are
//! rounded to f16 and the levels reassigned. A few alternations of least squares and
//! reassignment polish the best. The search runs in f32 over 8-lane accumulators (vectorised);
//! its winner is then compared with the [`Rounding::MinMax`] block in f64, so it is never worse.

use super::f16::Half;
use super::Rounding;

/// An asymmetric block before packing: `value_i = q[i] * d + m`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Asymmetric<const N: usize> {
    pub d: Half,
    pub m: Half,
    pub q: [u8; N],
}

/// A symmetric block before packing: `value_i = q[i] * d`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Symmetric<const N: usize> {
    pub d: Half,
    pub q: [i8; N],
}

/// Grid widths the search tries: the block's range spans `top + t` steps for `t` in
/// `T_MIN..=T_MAX` (`t > 0` clips the extremes, `t < 0` leaves head room).
const WIDTHS: usize = 5;
const T_MIN: f32 = -0.5;
const T_MAX: f32 = 1.5;

/// Grid widths a weighted search tries, over the same span.
const WEIGHTED_WIDTHS: usize = 17;

/// Least-squares refits of the best candidate.
const POLISH: usize = 2;

/// Accumulator lanes: independent partial sums let the compiler vectorise the f32 loops (it may
/// not reorder a single float sum). Block sizes are multiples of it.
const LANES: usize = 8;

/// Quantizes `w` to `levels` levels (`0..levels`) with a scale and a base.
pub(crate) fn asymmetric<const N: usize>(
    w: &[f32; N],
    levels: u8,
    rounding: Rounding,
) -> Asymmetric<N> {
    asymmetric_with(w, &[1.0; N], levels, rounding, WIDTHS)
}

/// Quantizes `w` to `levels` levels with a scale and a base chosen to minimise
/// `sum a_i (value_i - w_i)^2`, the error weighted by `a` (an importance matrix's weights,
/// all `>= 0`). The search tries [`WEIGHTED_WIDTHS`] grid widths: a weighted fit is made once
/// per file, so it can afford a finer search than loading does. Blocks whose weights are all
/// zero are fitted unweighted.
pub(crate) fn asymmetric_weighted<const N: usize>(
    w: &[f32; N],
    a: &[f32; N],
    levels: u8,
) -> Asymmetric<N> {
    if a.iter().sum::<f32>() > 0.0 {
        asymmetric_with(w, a, levels, Rounding::Search, WEIGHTED_WIDTHS)
    } else {
        asymmetric_with(w, &[1.0; N], levels, Rounding::Search, WEIGHTED_WIDTHS)
    }
}

/// The asymmetric search with weights `a` (all ones: the plain squared error) over `widths`
/// grid widths.
fn asymmetric_with<const N: usize>(
    w: &[f32; N],
    a: &[f32; N],
    levels: u8,
    rounding: Rounding,
    widths: usize,
) -> Asymmetric<N> {
    let (lo, hi) = min_max(w);
    let top = f32::from(levels - 1);
    // Inferflow's rule: level 0 at the minimum, the top level at the maximum.
    let (d, m) = (Half::from_f32((hi - lo) / top), Half::from_f32(lo));
    let q = assign(w, d.to_f32(), m.to_f32(), 0.0, top);
    let min_max = Asymmetric {
        d,
        m,
        q: to_levels(&q),
    };
    if rounding == Rounding::MinMax || lo == hi {
        return min_max;
    }

    let mut best = (d, m, error(w, a, &q, d, m));
    let try_fit = |q: &[f32; N], best: &mut (Half, Half, f32)| -> Option<()> {
        let (d, m) = least_squares(w, a, q)?;
        let (d, m) = (Half::from_f32(d), Half::from_f32(m));
        let err = error(w, a, &assign(w, d.to_f32(), m.to_f32(), 0.0, top), d, m);
        if err < best.2 {
            *best = (d, m, err);
        }
        Some(())
    };
    let range = hi - lo;
    for step in 0..widths {
        let t = T_MIN + (T_MAX - T_MIN) * step as f32 / (widths - 1) as f32;
        let d = range / (top + t);
        let slack = range - top * d; // > 0 when the grid is narrower than the range
        for base in [lo, lo + 0.5 * slack, lo + slack] {
            let _ = try_fit(&assign(w, d, base, 0.0, top), &mut best);
        }
    }
    for _ in 0..POLISH {
        let before = best;
        let q = assign(w, best.0.to_f32(), best.1.to_f32(), 0.0, top);
        if try_fit(&q, &mut best).is_none() || best == before {
            break;
        }
    }

    let (d, m) = (best.0, best.1);
    let searched = Asymmetric {
        d,
        m,
        q: to_levels(&assign(w, d.to_f32(), m.to_f32(), 0.0, top)),
    };
    if weighted_error(w, a, &searched) < weighted_error(w, a, &min_max) {
        searched
    } else {
        min_max
    }
}

/// Quantizes `w` to the levels `-max_level..=max_level` with a scale.
pub(crate) fn symmetric<const N: usize>(
    w: &[f32; N],
    max_level: i8,
    rounding: Rounding,
) -> Symmetric<N> {
    let amax = w.iter().fold(0.0f32, |a, &x| a.max(x.abs()));
    let top = f32::from(max_level);
    let d = Half::from_f32(amax / top);
    let levels = |d: Half| assign(w, d.to_f32(), 0.0, -top, top);
    let q = levels(d);
    let min_max = Symmetric {
        d,
        q: to_signed_levels(&q),
    };
    if rounding == Rounding::MinMax || amax == 0.0 {
        return min_max;
    }

    let zero = Half::ZERO;
    let ones = [1.0; N];
    let mut best = (d, error(w, &ones, &q, d, zero));
    let try_fit = |q: &[f32; N], best: &mut (Half, f32)| {
        if let Some(d) = least_squares_scale(w, q) {
            let d = Half::from_f32(d);
            let err = error(w, &ones, &levels(d), d, zero);
            if err < best.1 {
                *best = (d, err);
            }
        }
    };
    // The largest magnitude lands between `top + T_MIN` and `top + T_MAX` steps from zero.
    for step in 0..WIDTHS {
        let t = T_MIN + (T_MAX - T_MIN) * step as f32 / (WIDTHS - 1) as f32;
        try_fit(&assign(w, amax / (top + t), 0.0, -top, top), &mut best);
    }
    for _ in 0..POLISH {
        try_fit(&levels(best.0), &mut best);
    }

    let searched = Symmetric {
        d: best.0,
        q: to_signed_levels(&levels(best.0)),
    };
    if symmetric_error(w, &searched) < symmetric_error(w, &min_max) {
        searched
    } else {
        min_max
    }
}

/// Nearest levels in `lo..=hi` (whole numbers, as f32; `lo <= 0 <= hi`) for scale `d` and
/// base `m`: all 0, the level of `m` itself, when `d` has no finite inverse (a constant block,
/// or a range too small for f16).
fn assign<const N: usize>(w: &[f32; N], d: f32, m: f32, lo: f32, hi: f32) -> [f32; N] {
    let inv = 1.0 / d;
    if !(d > 0.0 && inv.is_finite()) {
        return [0.0; N];
    }
    // Adding and subtracting 1.5 * 2^23 rounds an f32 of magnitude below 2^22 to the nearest
    // whole number (ties to even): the sum lies in [2^23, 2^24), where f32 steps by 1. Unlike
    // `round`, it vectorises without SSE4.1.
    const MAGIC: f32 = 12_582_912.0;
    let mut q = [0.0; N];
    for (q, &w) in q.iter_mut().zip(w) {
        *q = ((w - m) * inv).clamp(lo, hi) + MAGIC - MAGIC;
    }
    q
}

fn to_levels<const N: usize>(q: &[f32; N]) -> [u8; N] {
    q.map(|q| q as u8)
}

fn to_signed_levels<const N: usize>(q: &[f32; N]) -> [i8; N] {
    q.map(|q| q as i8)
}

/// Least-squares scale and base for fixed levels: minimises `sum a_i (q_i d + m - w_i)^2`, or
/// `None` when all weighted levels are equal (any scale fits) or the fit is not a positive
/// scale.
fn least_squares<const N: usize>(w: &[f32; N], a: &[f32; N], q: &[f32; N]) -> Option<(f32, f32)> {
    // Sums in f32 lanes, added up in f64. With unit weights the level sums are exact: levels
    // and their squares are whole numbers far below 2^24.
    let mut acc = [[0.0f32; LANES]; 5];
    for ((w, q), a) in w
        .chunks_exact(LANES)
        .zip(q.chunks_exact(LANES))
        .zip(a.chunks_exact(LANES))
    {
        for l in 0..LANES {
            let (aq, aw) = (a[l] * q[l], a[l] * w[l]);
            acc[0][l] += a[l];
            acc[1][l] += aq;
            acc[2][l] += aq * q[l];
            acc[3][l] += aw;
            acc[4][l] += aq * w[l];
        }
    }
    let [sa, sq, sqq, sw, sqw] = acc.map(|v| v.iter().map(|&x| f64::from(x)).sum::<f64>());
    let det = sa * sqq - sq * sq;
    if !(det > 0.0 && sa > 0.0) {
        return None;
    }
    let d = (sa * sqw - sq * sw) / det;
    let m = (sw - d * sq) / sa;
    (d > 0.0).then_some((d as f32, m as f32))
}

/// Least-squares scale for fixed symmetric levels: minimises `sum (q_i d - w_i)^2`, or `None`
/// when all levels are zero.
fn least_squares_scale<const N: usize>(w: &[f32; N], q: &[f32; N]) -> Option<f32> {
    let mut acc = [[0.0f32; LANES]; 2];
    for (w, q) in w.chunks_exact(LANES).zip(q.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[0][l] += q[l] * q[l];
            acc[1][l] += q[l] * w[l];
        }
    }
    let [sqq, sqw] = acc.map(|v| v.iter().map(|&x| f64::from(x)).sum::<f64>());
    (sqq > 0.0).then(|| (sqw / sqq) as f32)
}

/// Squared error of levels `q` with scale `d` and base `m` against `w`, each term weighted by
/// `a`, in f32 (for ranking candidates); values are dequantized as the formats do.
fn error<const N: usize>(w: &[f32; N], a: &[f32; N], q: &[f32; N], d: Half, m: Half) -> f32 {
    let (d, m) = (d.to_f32(), m.to_f32());
    let mut acc = [0.0f32; LANES];
    for ((w, q), a) in w
        .chunks_exact(LANES)
        .zip(q.chunks_exact(LANES))
        .zip(a.chunks_exact(LANES))
    {
        for l in 0..LANES {
            let e = q[l] * d + m - w[l];
            acc[l] += a[l] * (e * e);
        }
    }
    acc.iter().sum()
}

/// Squared error of the block against `w`, each term weighted by `a`, in f64.
fn weighted_error<const N: usize>(w: &[f32; N], a: &[f32; N], block: &Asymmetric<N>) -> f64 {
    let (d, m) = (block.d.to_f32(), block.m.to_f32());
    w.iter()
        .zip(a)
        .zip(&block.q)
        .map(|((&w, &a), &q)| {
            let e = f64::from(w) - f64::from(f32::from(q) * d + m);
            f64::from(a) * e * e
        })
        .sum()
}

/// Squared error of the block against `w`, in f64.
pub(crate) fn symmetric_error<const N: usize>(w: &[f32; N], block: &Symmetric<N>) -> f64 {
    let d = block.d.to_f32();
    squared_error(w, &block.q.map(|q| f32::from(q) * d))
}

/// `sum (w_i - v_i)^2` in f64, in index order (the difference of two f32 values is exact in
/// f64).
pub(crate) fn squared_error(w: &[f32], v: &[f32]) -> f64 {
    w.iter()
        .zip(v)
        .map(|(&w, &v)| {
            let e = f64::from(w) - f64::from(v);
            e * e
        })
        .sum()
}

/// The smallest and largest value.
fn min_max(w: &[f32]) -> (f32, f32) {
    w.iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}
