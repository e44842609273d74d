//! IQ1_S's and IQ1_M's quantizers, as `llama-quantize` writes them: ggml's
//! `quantize_row_iq1_s_impl` and `quantize_row_iq1_m_impl`, kept in ggml's floating-point
//! operation order (f32, no fused multiply-adds) so the blocks are byte for byte ggml's.
//!
//! Both fit a scale and a level in {-1, 0, 1} per value to each sub-block (32 values in IQ1_S,
//! 16 in IQ1_M) by an exhaustive search over the sorted values, with the levels shifted by
//! ±1/8 (one shift per sub-block in IQ1_S, per 8 values in IQ1_M). Each 8 levels must then be
//! a row of the 2048-row grid; those that are not take the best of the grid rows nearest them
//! (`GridIndex`, ggml's `iq2xs_init_impl` tables), and the scale is refitted.

use std::sync::OnceLock;

use super::iq1::{BlockIq1M, BlockIq1S};
use super::iq_grids::IQ1S_PACKED;
use crate::formats::f16::Half;
use crate::formats::kquant::{importance_weight, nearest_int, sub_blocks, sum_squares, QK_K};

/// Bytes of an IQ1_S super-block.
pub const IQ1_S_BYTES: usize = size_of::<BlockIq1S>();
/// Bytes of an IQ1_M super-block.
pub const IQ1_M_BYTES: usize = size_of::<BlockIq1M>();

/// ggml's `IQ1S_DELTA` and `IQ1M_DELTA` (both 1/8): the shift of the levels.
const DELTA: f32 = 0.125;
/// Sub-blocks whose largest magnitude is below these are left zero (`GROUP_MAX_EPS_IQ1_*`).
const EPS_S: f32 = 1e-12;
const EPS_M: f32 = 1e-7;
/// How many of the nearest distinct distances a key's neighbour list spans (ggml's `nwant`).
const NEIGHBOUR_DISTANCES: usize = 3;

/// Quantizes one super-block to IQ1_S as ggml's `quantize_iq1_s` does, returning the block's
/// 50 bytes as GGUF stores them (`d`, `qs`, `qh`; see [`BlockIq1S`]).
///
/// `importance` is the block's 256 columns of llama.cpp's importance matrix. ggml requires one
/// for IQ1_S (it asserts); `None` weights every column 1, so each value counts by
/// `sqrt(sigma2 + x^2)` alone.
pub fn quantize_iq1_s(x: &[f32; QK_K], importance: Option<&[f32; QK_K]>) -> [u8; IQ1_S_BYTES] {
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let weights: [f32; QK_K] = std::array::from_fn(|i| {
        let imp = importance.map_or(1.0, |imp| imp[i]);
        importance_weight(imp, sigma2, x[i])
    });
    let fits: Vec<Fit<4>> = sub_blocks(x)
        .zip(sub_blocks(&weights))
        .map(|(xb, w)| fit_iq1_s(xb, w))
        .collect();

    let mut block = BlockIq1S {
        d: Half::ZERO,
        qs: [0; QK_K / 8],
        qh: [0; QK_K / 16],
    };
    let mut words = [0u16; QK_K / 32];
    for (ib, fit) in fits.iter().enumerate() {
        for (k, &row) in fit.rows.iter().enumerate() {
            block.qs[4 * ib + k] = row as u8;
            words[ib] |= (row >> 8) << (3 * k);
        }
    }
    let max_scale = largest_scale(&fits);
    if max_scale != 0.0 {
        let d = max_scale / 15.0;
        // ggml's fudge factor on the stored scale.
        block.d = Half::from_f32(d * 1.125);
        let id = 1.0 / d;
        for (word, fit) in words.iter_mut().zip(&fits) {
            let mut l = scale_code(id, fit.scale);
            if fit.minus[0] {
                l |= 8;
            }
            *word |= l << 12;
        }
    }
    for (ib, word) in words.iter().enumerate() {
        block.qh[2 * ib..2 * ib + 2].copy_from_slice(&word.to_le_bytes());
    }
    to_bytes(&block)
}

/// Quantizes one super-block to IQ1_M as ggml's `quantize_iq1_m` does, returning the block's
/// 56 bytes as GGUF stores them (`qs`, `qh`, `scales`; see [`BlockIq1M`]).
///
/// `importance` is the block's 256 columns of llama.cpp's importance matrix; with `None` each
/// value is weighted by its square, ggml's own path without a matrix.
pub fn quantize_iq1_m(x: &[f32; QK_K], importance: Option<&[f32; QK_K]>) -> [u8; IQ1_M_BYTES] {
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let weights: [f32; QK_K] = std::array::from_fn(|i| match importance {
        Some(imp) => importance_weight(imp[i], sigma2, x[i]),
        None => x[i] * x[i],
    });
    let fits: Vec<Fit<2>> = sub_blocks(x)
        .zip(sub_blocks(&weights))
        .map(|(xb, w)| fit_iq1_m(xb, w))
        .collect();

    let mut block = BlockIq1M {
        qs: [0; QK_K / 8],
        qh: [0; QK_K / 16],
        scales: [0; QK_K / 32],
    };
    for (ib, fit) in fits.iter().enumerate() {
        block.qs[2 * ib] = fit.rows[0] as u8;
        block.qs[2 * ib + 1] = fit.rows[1] as u8;
        block.qh[ib] = (fit.rows[0] >> 8 | (fit.rows[1] >> 8) << 4) as u8;
    }
    let max_scale = largest_scale(&fits);
    if max_scale == 0.0 {
        return to_bytes(&block);
    }

    let d = max_scale / 15.0;
    let id = 1.0 / d;
    let codes: Vec<u16> = fits.iter().map(|fit| scale_code(id, fit.scale)).collect();
    let mut words = [0u16; QK_K / 64];
    for (ib, (fit, &l)) in fits.iter().zip(&codes).enumerate() {
        words[ib / 4] |= l << (3 * (ib % 4));
        block.qh[ib] |= u8::from(fit.minus[0]) << 3 | u8::from(fit.minus[1]) << 7;
    }
    let d = refit_block_scale(x, &weights, &fits, &codes).unwrap_or(d);
    // ggml's fudge factor on the stored scale, whose 16 bits go in the words' top nibbles.
    let bits = Half::from_f32(d * 1.1125).to_bits();
    for (i, word) in words.iter_mut().enumerate() {
        *word |= (bits >> (4 * i) & 0x000F) << 12;
        block.scales[2 * i..2 * i + 2].copy_from_slice(&word.to_le_bytes());
    }
    to_bytes(&block)
}

/// IQ1_M's block scale refitted by weighted least squares to the levels and rounded sub-block
/// scales (`codes`) chosen, over the whole super-block; `None` if no value has weight.
fn refit_block_scale(
    x: &[f32; QK_K],
    weights: &[f32; QK_K],
    fits: &[Fit<2>],
    codes: &[u16],
) -> Option<f32> {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (ib, (fit, &l)) in fits.iter().zip(codes).enumerate() {
        let multiple = f32::from(2 * l + 1);
        for (k, (&row, &minus)) in fit.rows.iter().zip(&fit.minus).enumerate() {
            let levels = shifted_levels(minus);
            for (j, &g) in grid_levels(row).iter().enumerate() {
                let i = 16 * ib + 8 * k + j;
                let q = levels[usize::from(g)] * multiple;
                sumqx += weights[i] * q * x[i];
                sumq2 += weights[i] * q * q;
            }
        }
    }
    (sumq2 > 0.0).then(|| sumqx / sumq2)
}

/// One sub-block's fit of `G` groups of 8: its scale (not negative), each group's grid row and
/// whether the group's levels are shifted down (`-DELTA`) rather than up.
#[derive(Clone, Copy)]
struct Fit<const G: usize> {
    scale: f32,
    rows: [u16; G],
    minus: [bool; G],
}

impl<const G: usize> Fit<G> {
    /// ggml's result for a sub-block it leaves out: scale 0, row 0, shifted up.
    const ZERO: Self = Fit {
        scale: 0.0,
        rows: [0; G],
        minus: [false; G],
    };
}

/// A split of the sorted values into levels: the first `i1` take -1, those up to `i2` 0, the
/// rest 1; and the fitted scale, possibly negative.
struct Split<const G: usize> {
    i1: usize,
    i2: usize,
    scale: f32,
    minus: [bool; G],
}

/// IQ1_S's 32-value sub-block: one shift for all 32.
fn fit_iq1_s(xb: &[f32; 32], weights: &[f32; 32]) -> Fit<4> {
    if largest_magnitude(xb) < EPS_S {
        return Fit::ZERO;
    }
    let order = ascending(xb);
    let sumx = prefix_sums(&order, |i| weights[i] * xb[i]);
    let sumw = prefix_sums(&order, |i| weights[i]);
    let mut best: Option<Split<4>> = None;
    let mut best_score = -f32::MAX;
    for i1 in 0..=32 {
        for i2 in i1..=32 {
            let qx = [sumx[i1] - sumx[0], sumx[i2] - sumx[i1], sumx[32] - sumx[i2]];
            let qw = [sumw[i1] - sumw[0], sumw[i2] - sumw[i1], sumw[32] - sumw[i2]];
            for minus in [false, true] {
                let xs = shifted_levels(minus);
                let sumqx = qx[0] * xs[0] + qx[1] * xs[1] + qx[2] * xs[2];
                let sumq2 = qw[0] * xs[0] * xs[0] + qw[1] * xs[1] * xs[1] + qw[2] * xs[2] * xs[2];
                if let Some(scale) = better(sumqx, sumq2, &mut best_score) {
                    best = Some(Split {
                        i1,
                        i2,
                        scale,
                        minus: [minus; 4],
                    });
                }
            }
        }
    }
    best.map_or(Fit::ZERO, |split| on_grid(xb, weights, &order, split))
}

/// IQ1_M's 16-value sub-block: a shift for each 8. The search keeps prefix sums per half, so
/// the four pairs of shifts cost one pass (ggml's closed form: the shifted levels are one apart,
/// so a split's sum is `total * v[2]` less the two prefix sums).
fn fit_iq1_m(xb: &[f32; 16], weights: &[f32; 16]) -> Fit<2> {
    if largest_magnitude(xb) < EPS_M {
        return Fit::ZERO;
    }
    let order = ascending(xb);
    let (px, pw) = half_prefix_sums(xb, weights, &order);
    let [plus, minus] = [false, true].map(shifted_levels);
    let (p2, m2) = (plus[2], minus[2]);
    let cp1 = plus[0] * plus[0] - plus[1] * plus[1];
    let cp2 = plus[1] * plus[1] - plus[2] * plus[2];
    let cm1 = minus[0] * minus[0] - minus[1] * minus[1];
    let cm2 = minus[1] * minus[1] - minus[2] * minus[2];

    let mut best: Option<Split<2>> = None;
    let mut best_score = -f32::MAX;
    for i1 in 0..=16 {
        for i2 in i1..=16 {
            // Per half: [shifted up, shifted down].
            let mut qx = [[0.0f32; 2]; 2];
            let mut q2 = [[0.0f32; 2]; 2];
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx[h] = [px[h][16] * p2 - sx, px[h][16] * m2 - sx];
                q2[h] = [
                    pw[h][16] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2,
                    pw[h][16] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2,
                ];
            }
            // ggml's order: (+, +), (+, -), (-, +), (-, -).
            for k in 0..4 {
                let (s0, s1) = (k / 2, k % 2);
                let sumqx = qx[0][s0] + qx[1][s1];
                let sumq2 = q2[0][s0] + q2[1][s1];
                if let Some(scale) = better(sumqx, sumq2, &mut best_score) {
                    best = Some(Split {
                        i1,
                        i2,
                        scale,
                        minus: [s0 == 1, s1 == 1],
                    });
                }
            }
        }
    }
    best.map_or(Fit::ZERO, |split| on_grid(xb, weights, &order, split))
}

/// ggml's test for a better candidate: `sumqx^2 / sumq2` above the best so far (compared
/// without dividing), whose scale `sumqx / sumq2` it returns, updating `best_score`.
fn better(sumqx: f32, sumq2: f32, best_score: &mut f32) -> Option<f32> {
    if sumq2 > 0.0 && sumqx * sumqx > *best_score * sumq2 {
        let scale = sumqx / sumq2;
        *best_score = scale * sumqx;
        Some(scale)
    } else {
        None
    }
}

/// Turns the best split into levels, makes the scale positive (mirroring the levels and the
/// shifts), and puts each 8 on the grid: its own row if it is one, else the best of the rows
/// nearest it, after which the scale is refitted to the rows taken.
fn on_grid<const N: usize, const G: usize>(
    xb: &[f32; N],
    weights: &[f32; N],
    order: &[usize; N],
    split: Split<G>,
) -> Fit<G> {
    let mut levels = [0u8; N];
    for (rank, &i) in order.iter().enumerate() {
        levels[i] = u8::from(rank >= split.i1) + u8::from(rank >= split.i2);
    }
    let (mut scale, mut minus) = (split.scale, split.minus);
    if scale < 0.0 {
        levels = levels.map(|l| 2 - l);
        scale = -scale;
        minus = minus.map(|m| !m);
    }

    let index = grid_index();
    let mut all_on_grid = true;
    let mut rows = [0u16; G];
    for (k, row) in rows.iter_mut().enumerate() {
        let group = 8 * k..8 * k + 8;
        let key = levels[group.clone()]
            .iter()
            .enumerate()
            .fold(0u16, |key, (j, &l)| key | u16::from(l) << (2 * j));
        *row = match index.lookup(key) {
            Lookup::Row(row) => row,
            Lookup::Near(rows) => {
                all_on_grid = false;
                let xs = shifted_levels(minus[k]);
                best_neighbour(rows, &xb[group.clone()], &weights[group], scale, &xs)
            }
        };
    }
    if !all_on_grid {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for (k, &row) in rows.iter().enumerate() {
            let xs = shifted_levels(minus[k]);
            for (j, &g) in grid_levels(row).iter().enumerate() {
                let (w, q) = (weights[8 * k + j], xs[usize::from(g)]);
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    Fit { scale, rows, minus }
}

/// ggml's `iq1_find_best_neighbour2`: of `candidates` (in list order, the first on ties), the
/// row whose shifted levels `xs` times `scale` are nearest `x` in weighted squared error.
///
/// ggml aborts when no candidate's error is below `f32::MAX` (possible only when the error
/// overflows); this takes the first candidate then.
fn best_neighbour(candidates: &[u16], x: &[f32], w: &[f32], scale: f32, xs: &[f32; 3]) -> u16 {
    let mut best_score = f32::MAX;
    let mut best = candidates.first().copied().unwrap_or(0);
    for &row in candidates {
        let mut d2 = 0.0f32;
        for (j, &g) in grid_levels(row).iter().enumerate() {
            let diff = scale * xs[usize::from(g)] - x[j];
            d2 += w[j] * diff * diff;
        }
        if d2 < best_score {
            best_score = d2;
            best = row;
        }
    }
    best
}

/// The levels -1, 0, 1 shifted by `+DELTA`, or by `-DELTA` when `minus` (ggml's `x_p`, `x_m`).
fn shifted_levels(minus: bool) -> [f32; 3] {
    let delta = if minus { -DELTA } else { DELTA };
    [-1.0 + delta, delta, 1.0 + delta]
}

/// A sub-block scale as its 3-bit code `s`, the multiple `2s + 1` of the block scale nearest
/// it (`id` the inverse of the block scale), in ggml's order of operations.
fn scale_code(id: f32, scale: f32) -> u16 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 7) as u16
}

/// The largest sub-block scale, as ggml's `MAX` chain takes it.
fn largest_scale<const G: usize>(fits: &[Fit<G>]) -> f32 {
    fits.iter().fold(
        0.0f32,
        |max, fit| {
            if max > fit.scale {
                max
            } else {
                fit.scale
            }
        },
    )
}

fn largest_magnitude(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |max, &v| max.max(v.abs()))
}

/// The indices of `x` sorted by value, equal values in index order: glibc's `qsort`, which
/// ggml sorts them with, is a stable merge sort for arrays this small.
fn ascending<const N: usize>(x: &[f32; N]) -> [usize; N] {
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_by(|&a, &b| x[a].partial_cmp(&x[b]).unwrap_or(std::cmp::Ordering::Equal));
    order
}

/// `sums[r] = f(order[0]) + .. + f(order[r - 1])`, accumulated in f32 in rank order.
fn prefix_sums<const N: usize>(order: &[usize; N], f: impl Fn(usize) -> f32) -> Vec<f32> {
    let mut sums = Vec::with_capacity(N + 1);
    sums.push(0.0f32);
    for (rank, &i) in order.iter().enumerate() {
        sums.push(sums[rank] + f(i));
    }
    sums
}

/// IQ1_M's prefix sums of `w * x` and of `w` in rank order, kept for each half of the
/// sub-block apart (a value adds only to its own half's), as ggml's `px` and `pw`.
fn half_prefix_sums(
    xb: &[f32; 16],
    weights: &[f32; 16],
    order: &[usize; 16],
) -> ([[f32; 17]; 2], [[f32; 17]; 2]) {
    let mut px = [[0.0f32; 17]; 2];
    let mut pw = [[0.0f32; 17]; 2];
    for (rank, &i) in order.iter().enumerate() {
        let h = i / 8;
        px[h][rank + 1] = px[h][rank] + weights[i] * xb[i];
        px[1 - h][rank + 1] = px[1 - h][rank];
        pw[h][rank + 1] = pw[h][rank] + weights[i];
        pw[1 - h][rank + 1] = pw[1 - h][rank];
    }
    (px, pw)
}

/// A block's bytes, as GGUF stores it.
fn to_bytes<B: bytemuck::Pod, const N: usize>(block: &B) -> [u8; N] {
    bytemuck::bytes_of(block)
        .try_into()
        .expect("the byte count is the block's size")
}

/// Grid row `row`'s eight level indices (0, 1, 2 for -1, 0, 1), first value first.
fn grid_levels(row: u16) -> [u8; 8] {
    key_levels(IQ1S_PACKED[usize::from(row)])
}

/// A key's (or packed row's) eight 2-bit level indices, first value in the low bits.
fn key_levels(key: u16) -> [u8; 8] {
    std::array::from_fn(|j| (key >> (2 * j) & 3) as u8)
}

/// The largest key: eight levels of index 2.
const MAX_KEY: u16 = 0xAAAA;

/// ggml's `iq2xs_init_impl` tables for IQ1_S's grid, indexed by key (eight 2-bit level
/// indices, first value lowest, as ggml's `kmap_q2xs`): each key is a grid row, or lists the
/// grid rows at its three smallest distances, nearest first and in row order on ties.
struct GridIndex {
    slots: Vec<Slot>,
    neighbours: Vec<u16>,
}

#[derive(Clone, Copy)]
enum Slot {
    Row(u16),
    Near { start: u32, len: u32 },
}

enum Lookup<'a> {
    Row(u16),
    Near(&'a [u16]),
}

impl GridIndex {
    fn build() -> Self {
        let rows: Vec<[u8; 8]> = IQ1S_PACKED.iter().map(|&p| key_levels(p)).collect();
        let mut slots = vec![Slot::Near { start: 0, len: 0 }; usize::from(MAX_KEY) + 1];
        for (row, &packed) in IQ1S_PACKED.iter().enumerate() {
            slots[usize::from(packed)] = Slot::Row(row as u16);
        }
        let mut neighbours = Vec::new();
        for key in 0..=MAX_KEY {
            let levels = key_levels(key);
            // Keys with a level index 3 stand for no levels; ggml lists theirs, never used.
            if matches!(slots[usize::from(key)], Slot::Row(_)) || levels.contains(&3) {
                continue;
            }
            let start = neighbours.len();
            nearest_rows(&levels, &rows, &mut neighbours);
            slots[usize::from(key)] = Slot::Near {
                start: start as u32,
                len: (neighbours.len() - start) as u32,
            };
        }
        GridIndex { slots, neighbours }
    }

    fn lookup(&self, key: u16) -> Lookup<'_> {
        match self.slots[usize::from(key)] {
            Slot::Row(row) => Lookup::Row(row),
            Slot::Near { start, len } => {
                Lookup::Near(&self.neighbours[start as usize..(start + len) as usize])
            }
        }
    }
}

/// The grid rows whose squared distance from `levels` is one of the three smallest distances
/// any row has, appended by distance then row: ggml's sort by (distance, row), cut after the
/// third distinct distance. ggml measures in units of its grid bytes (`2l + 1`), four times
/// these distances, which orders the rows the same.
fn nearest_rows(levels: &[u8; 8], rows: &[[u8; 8]], out: &mut Vec<u16>) {
    let distances: Vec<u8> = rows
        .iter()
        .map(|row| {
            row.iter()
                .zip(levels)
                .map(|(&a, &b)| a.abs_diff(b).pow(2))
                .sum()
        })
        .collect();
    // At most 8 values differ by at most 2 each.
    let mut present = [false; 33];
    for &d in &distances {
        present[usize::from(d)] = true;
    }
    for d in (0..present.len())
        .filter(|&d| present[d])
        .take(NEIGHBOUR_DISTANCES)
    {
        let at = distances
            .iter()
            .enumerate()
            .filter(|&(_, &e)| usize::from(e) == d);
        out.extend(at.map(|(row, _)| row as u16));
    }
}

/// The index over IQ1_S's grid, built on first use.
fn grid_index() -> &'static GridIndex {
    static INDEX: OnceLock<GridIndex> = OnceLock::new();
    INDEX.get_or_init(GridIndex::build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_rows_index_themselves_and_others_list_near_rows() {
        let index = grid_index();
        for (row, &packed) in IQ1S_PACKED.iter().enumerate() {
            assert!(matches!(index.lookup(packed), Lookup::Row(r) if usize::from(r) == row));
        }
        // Every key of levels 0..=2 is a row or has neighbours, at most three distances away.
        let mut off_grid = 0;
        for key in (0..=MAX_KEY).filter(|&k| !key_levels(k).contains(&3)) {
            if let Lookup::Near(rows) = index.lookup(key) {
                off_grid += 1;
                assert!(!rows.is_empty());
                let d = |r: u16| -> u32 {
                    grid_levels(r)
                        .iter()
                        .zip(key_levels(key))
                        .map(|(&a, b)| u32::from(a.abs_diff(b)).pow(2))
                        .sum()
                };
                assert!(rows.windows(2).all(|p| (d(p[0]), p[0]) < (d(p[1]), p[1])));
            }
        }
        assert_eq!(off_grid, 3usize.pow(8) - 2048);
    }

    #[test]
    fn zero_super_blocks_are_zero_bytes() {
        let zeros = [0.0f32; QK_K];
        assert_eq!(quantize_iq1_s(&zeros, None), [0; IQ1_S_BYTES]);
        assert_eq!(quantize_iq1_m(&zeros, None), [0; IQ1_M_BYTES]);
    }

    /// Three levels per value: the error's mean square well under the ramp's own (about 1/3).
    fn assert_close(x: &[f32; QK_K], out: &[f32; QK_K]) {
        let err: f32 = x.iter().zip(out).map(|(a, b)| (a - b).powi(2)).sum();
        assert!(err / (QK_K as f32) < 0.1, "{err}");
    }

    #[test]
    fn a_ramp_dequantizes_close_to_itself() {
        let x: [f32; QK_K] = std::array::from_fn(|i| (i % 32) as f32 / 16.0 - 1.0);
        let s: BlockIq1S = bytemuck::pod_read_unaligned(&quantize_iq1_s(&x, None));
        let m: BlockIq1M = bytemuck::pod_read_unaligned(&quantize_iq1_m(&x, None));
        let mut out = [0.0f32; QK_K];
        s.dequantize(&mut out);
        assert_close(&x, &out);
        m.dequantize(&mut out);
        assert_close(&x, &out);
    }
}
