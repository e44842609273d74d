//! Quantizers for IQ2_XXS, IQ2_XS and IQ2_S that write the blocks `llama-quantize` writes,
//! byte for byte: ggml's `quantize_row_iq2_xxs_impl`, `quantize_row_iq2_xs_impl` and
//! `quantize_row_iq2_s_impl` (`ggml-quants.c`), in the same f32 operation order.
//!
//! All three fit each sub-block (32 values for XXS, 16 for XS and S) the same way: the values'
//! magnitudes are rounded to the levels 1, 3, 5 of a trial scale, each group of 8 levels is
//! snapped to the grid (to the best of its nearest rows when it is not a row itself), and the
//! trial whose weighted least-squares scale fits best wins. The signs are stored apart, 7 bits a
//! group for XXS and XS (one magnitude is negated to keep the count of negative values even),
//! 8 for S. The sub-block scales are then stored as 4-bit multiples of the super-block's f16.
//!
//! ggml's one-time tables (`iq2xs_init_impl`: which points of 8 levels are grid rows, and the
//! rows nearest each point that is not) are built on first use.

use std::sync::OnceLock;

use super::iq2::{BlockIq2S, BlockIq2Xs, BlockIq2Xxs};
use super::iq_grids::{IQ2S_PACKED, IQ2XS_PACKED, IQ2XXS_PACKED};
use crate::formats::f16::Half;
use crate::formats::kquant::{
    importance_weight, make_qp_quants, nearest_int, sum_squares, GROUP_MAX_EPS, QK_K,
};

/// Bytes of an IQ2_XXS super-block.
pub const IQ2_XXS_BYTES: usize = size_of::<BlockIq2Xxs>();
/// Bytes of an IQ2_XS super-block.
pub const IQ2_XS_BYTES: usize = size_of::<BlockIq2Xs>();
/// Bytes of an IQ2_S super-block.
pub const IQ2_S_BYTES: usize = size_of::<BlockIq2S>();

/// IQ2_S skips sub-blocks below this largest magnitude (ggml's `GROUP_MAX_EPS_IQ2_S`).
const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;

/// The largest level index (levels 0..=2 stand for the values 1, 3, 5 times the scale).
const MAX_LEVEL: i32 = 2;

/// Quantizes one super-block to IQ2_XXS (66 bytes: 2.0625 bits per weight) as ggml's
/// `quantize_row_iq2_xxs_impl` does, with `importance` the super-block's 256 columns of
/// llama.cpp's importance matrix. ggml requires a matrix for this type; `None` weighs every
/// column alike (all-ones importance).
pub fn quantize_iq2_xxs(x: &[f32; QK_K], importance: Option<&[f32; QK_K]>) -> [u8; IQ2_XXS_BYTES] {
    let lattice = lattice(Grid::Xxs);
    let sigma2 = sum_squares(x) / QK_K as f32;
    let mut words = [0u32; QK_K / 16];
    let mut scales = [0.0f32; QK_K / 32];
    for (ib, (xb, pair)) in x
        .chunks_exact(32)
        .zip(words.chunks_exact_mut(2))
        .enumerate()
    {
        let weight = |j: usize| importance_weight(column(importance, 32 * ib + j), sigma2, xb[j]);
        let (sub, mut signs) = SubBlock::<4>::new(xb, weight, true);
        if sub.max() < GROUP_MAX_EPS {
            continue;
        }
        // The search's range comes from the best 4-level scale of the magnitudes.
        let (xval, weight): ([f32; 32], [f32; 32]) =
            (bytemuck::cast(sub.xval), bytemuck::cast(sub.weight));
        let scale = make_qp_quants(4, &xval, &weight, &mut [0; 32]);
        let eff_max = scale * 3.0;
        if eff_max <= 0.0 {
            continue;
        }
        let (mut scale, mut fit) = sub.search(lattice, -6..=6, eff_max, scale);
        if scale > 0.0 {
            scale = sub.refit(lattice, scale, &mut fit, [true; 4]);
        }
        if scale < 0.0 {
            scale = -scale;
            signs = signs.map(|s| !s & 127);
        }
        for (k, (&row, &s)) in fit.rows.iter().zip(&signs).enumerate() {
            pair[0] |= u32::from(row) << (8 * k);
            pair[1] |= u32::from(s & 127) << (7 * k);
        }
        scales[ib] = scale;
    }
    let mut block = BlockIq2Xxs {
        d: Half::from_f32(0.0),
        qs: [0; QK_K / 4],
    };
    let max_scale = scales.iter().fold(0.0f32, |m, &s| ggml_max(m, s));
    if max_scale != 0.0 {
        let d = max_scale / 31.0;
        block.d = Half::from_f32(d);
        let id = 1.0 / d;
        for (pair, &scale) in words.chunks_exact_mut(2).zip(&scales) {
            pair[1] |= u32::from(scale_nibble(id, scale)) << 28;
        }
        for (bytes, word) in block.qs.chunks_exact_mut(4).zip(words) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
    }
    block_bytes(&block)
}

/// Quantizes one super-block to IQ2_XS (74 bytes: 2.3125 bits per weight) as ggml's
/// `quantize_row_iq2_xs_impl` does, with `importance` the super-block's 256 columns of
/// llama.cpp's importance matrix. ggml requires a matrix for this type; `None` weighs every
/// column alike (all-ones importance).
pub fn quantize_iq2_xs(x: &[f32; QK_K], importance: Option<&[f32; QK_K]>) -> [u8; IQ2_XS_BYTES] {
    let lattice = lattice(Grid::Xs);
    let sigma2 = sum_squares(x) / QK_K as f32;
    let mut words = [0u16; QK_K / 8];
    let mut scales = [0.0f32; QK_K / 16];
    for (ib, (xb, pair)) in x
        .chunks_exact(16)
        .zip(words.chunks_exact_mut(2))
        .enumerate()
    {
        let weight = |j: usize| importance_weight(column(importance, 16 * ib + j), sigma2, xb[j]);
        let (sub, signs) = SubBlock::<2>::new(xb, weight, true);
        let Some((scale, fit, signs)) = sub.fit_16(lattice, GROUP_MAX_EPS, signs) else {
            continue;
        };
        for (word, (&row, &s)) in pair.iter_mut().zip(fit.rows.iter().zip(&signs)) {
            *word = row | u16::from(s & 127) << 9;
        }
        scales[ib] = scale;
    }
    let mut block = BlockIq2Xs {
        d: Half::from_f32(0.0),
        qs: [0; QK_K / 4],
        scales: [0; QK_K / 32],
    };
    let max_scale = scales.iter().fold(0.0f32, |m, &s| ggml_max(m, s));
    if max_scale != 0.0 {
        let d = max_scale / 31.0;
        block.d = Half::from_f32(d);
        block.scales = scale_nibbles(1.0 / d, &scales);
        for (bytes, word) in block.qs.chunks_exact_mut(2).zip(words) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
    }
    block_bytes(&block)
}

/// Quantizes one super-block to IQ2_S (82 bytes: 2.5625 bits per weight) as ggml's
/// `quantize_row_iq2_s_impl` does, with `importance` the super-block's 256 columns of
/// llama.cpp's importance matrix; `None` follows ggml's own path without one (each value
/// weighted by `sigma2 / 4 + x^2`).
pub fn quantize_iq2_s(x: &[f32; QK_K], importance: Option<&[f32; QK_K]>) -> [u8; IQ2_S_BYTES] {
    let lattice = lattice(Grid::S);
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    let mut block = BlockIq2S {
        d: Half::from_f32(0.0),
        qs: [0; QK_K / 4],
        qh: [0; QK_K / 32],
        scales: [0; QK_K / 32],
    };
    let mut scales = [0.0f32; QK_K / 16];
    for (ib, xb) in x.chunks_exact(16).enumerate() {
        let weight = |j: usize| match importance {
            Some(imp) => importance_weight(imp[16 * ib + j], sigma2, xb[j]),
            None => 0.25 * sigma2 + xb[j] * xb[j],
        };
        let (sub, signs) = SubBlock::<2>::new(xb, weight, false);
        let Some((scale, fit, signs)) = sub.fit_16(lattice, GROUP_MAX_EPS_IQ2_S, signs) else {
            continue;
        };
        for (k, (&row, &s)) in fit.rows.iter().zip(&signs).enumerate() {
            let g = 2 * ib + k;
            block.qs[g] = row as u8;
            block.qh[g / 4] |= ((row >> 8) as u8) << (2 * (g % 4));
            block.qs[QK_K / 8 + g] = s;
        }
        scales[ib] = scale;
    }
    // Unlike XXS and XS, ggml keeps the groups' bytes when every scale is zero.
    let max_scale = scales.iter().fold(0.0f32, |m, &s| ggml_max(m, s));
    if max_scale != 0.0 {
        let d = max_scale / 31.0;
        // ggml stores a slightly smaller d than it rounds the scales by.
        block.d = Half::from_f32(d * 0.9875);
        block.scales = scale_nibbles(1.0 / d, &scales);
    }
    block_bytes(&block)
}

/// A block's bytes as GGUF stores them.
fn block_bytes<B: bytemuck::Pod, const N: usize>(block: &B) -> [u8; N] {
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(bytemuck::bytes_of(block));
    bytes
}

/// Column `j`'s importance, 1 without a matrix.
fn column(importance: Option<&[f32; QK_K]>, j: usize) -> f32 {
    importance.map_or(1.0, |imp| imp[j])
}

/// C's `MAX(a, b)`: `b` unless `a` is greater.
fn ggml_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// A sub-block scale as the 4-bit `s` for which `d * (2s + 1)` is nearest it, `id` being
/// `1 / d`.
fn scale_nibble(id: f32, scale: f32) -> u8 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15) as u8
}

/// XS's and S's 16-value sub-block scales as nibbles, two a byte, first low.
fn scale_nibbles(id: f32, scales: &[f32; QK_K / 16]) -> [u8; QK_K / 32] {
    std::array::from_fn(|i| {
        scale_nibble(id, scales[2 * i]) | scale_nibble(id, scales[2 * i + 1]) << 4
    })
}

/// A sub-block of `G` groups of 8 values, as the quantizers fit it.
struct SubBlock<const G: usize> {
    /// The magnitudes, but for the value XXS and XS negate to keep a group's signs even.
    xval: [[f32; 8]; G],
    /// Each value's weight in the scale fits.
    weight: [[f32; 8]; G],
    /// The weights' square roots, which the neighbour search weighs by.
    waux: [[f32; 8]; G],
}

/// The grid rows chosen for a sub-block's groups.
#[derive(Clone, Copy)]
struct Fit<const G: usize> {
    /// Each group's row.
    rows: [u16; G],
    /// Its levels, 0..=2.
    levels: [[u8; 8]; G],
    /// Whether the rounding landed on the row, without a neighbour search.
    on_grid: [bool; G],
}

impl<const G: usize> Fit<G> {
    /// ggml's start: all levels 0 (row 0 of every grid), on the grid.
    fn zero() -> Self {
        Fit {
            rows: [0; G],
            levels: [[0; 8]; G],
            on_grid: [true; G],
        }
    }
}

impl<const G: usize> SubBlock<G> {
    /// The magnitudes and each group's signs (bit `i` set where value `i` is negative) of the
    /// values `x`, weighted by `weight(j)`. With `even_signs`, a group with an odd count of
    /// negative values flips the sign of the value of least `weight * x^2` (the first of
    /// equals), whose magnitude becomes negative.
    fn new(x: &[f32], weight: impl Fn(usize) -> f32, even_signs: bool) -> (Self, [u8; G]) {
        let weight: [[f32; 8]; G] =
            std::array::from_fn(|k| std::array::from_fn(|i| weight(8 * k + i)));
        let waux = weight.map(|w| w.map(f32::sqrt));
        let mut xval = [[0.0f32; 8]; G];
        let mut signs = [0u8; G];
        for (k, (xv, s)) in xval.iter_mut().zip(&mut signs).enumerate() {
            let xg = &x[8 * k..8 * k + 8];
            for (i, (xv, &v)) in xv.iter_mut().zip(xg).enumerate() {
                *xv = if v >= 0.0 { v } else { -v };
                *s |= u8::from(v < 0.0) << i;
            }
            if even_signs && s.count_ones() % 2 == 1 {
                let mut imin = 0;
                let mut min = weight[k][0] * xg[0] * xg[0];
                for (i, (&w, &v)) in weight[k].iter().zip(xg).enumerate().skip(1) {
                    let ax = w * v * v;
                    if ax < min {
                        min = ax;
                        imin = i;
                    }
                }
                xv[imin] = -xv[imin];
                *s ^= 1 << imin;
            }
        }
        (SubBlock { xval, weight, waux }, signs)
    }

    /// The largest magnitude, as ggml scans it.
    fn max(&self) -> f32 {
        let x = self.xval.as_flattened();
        x.iter().fold(x[0], |m, &v| ggml_max(m, v))
    }

    /// XS's and S's fit of a 16-value sub-block: `None` where its largest magnitude is below
    /// `eps` (ggml writes nothing for it), else the scale, the rows and the signs (each
    /// inverted where the fit came out negative, for the scale is stored unsigned).
    fn fit_16(
        &self,
        lattice: &Lattice,
        eps: f32,
        signs: [u8; G],
    ) -> Option<(f32, Fit<G>, [u8; G])> {
        let max = self.max();
        if max < eps {
            return None;
        }
        let (mut scale, mut fit) = self.search(lattice, -9..=9, max, max / 5.0);
        let redo = fit.on_grid.map(|on| !on);
        if redo.contains(&true) && scale > 0.0 {
            scale = self.refit(lattice, scale, &mut fit, redo);
        }
        if scale < 0.0 {
            return Some((-scale, fit, signs.map(|s| !s)));
        }
        Some((scale, fit, signs))
    }

    /// Tries the scales `top / (5 + step / 10)`: rounds every group at each, fits the
    /// least-squares scale to the rows it gets, and keeps the fit that explains the most
    /// (ggml's `sumqx^2 / sumq2`, first of equals). Returns `scale` and all-zero levels when
    /// none explains anything.
    fn search(
        &self,
        lattice: &Lattice,
        steps: std::ops::RangeInclusive<i32>,
        top: f32,
        scale: f32,
    ) -> (f32, Fit<G>) {
        let (mut scale, mut fit) = (scale, Fit::zero());
        let mut best = 0.0f32;
        for is in steps {
            let id = (5.0 + is as f32 * 0.1) / top;
            let mut trial = Fit::zero();
            for k in 0..G {
                self.round_group(lattice, k, id, 1.0 / id, &mut trial);
            }
            let (sumqx, sumq2) = self.sums(&trial);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                fit = trial;
            }
        }
        (scale, fit)
    }

    /// Rounds the groups marked in `redo` again at `scale` itself and returns the
    /// least-squares scale of the resulting rows (`scale` if the fit is empty).
    fn refit(&self, lattice: &Lattice, scale: f32, fit: &mut Fit<G>, redo: [bool; G]) -> f32 {
        let id = 1.0 / scale;
        for k in (0..G).filter(|&k| redo[k]) {
            self.round_group(lattice, k, id, scale, fit);
        }
        let (sumqx, sumq2) = self.sums(fit);
        if sumq2 > 0.0 {
            sumqx / sumq2
        } else {
            scale
        }
    }

    /// Group `k`'s levels at the inverse scale `id` (the nearest of 1, 3, 5), snapped to the
    /// grid: the row they are, or else the neighbour nearest the magnitudes at `scale`.
    fn round_group(&self, lattice: &Lattice, k: usize, id: f32, scale: f32, fit: &mut Fit<G>) {
        let levels =
            self.xval[k].map(|v| nearest_int(0.5 * (id * v - 1.0)).clamp(0, MAX_LEVEL) as u8);
        let (row, on_grid) = match lattice.points[point_key(&levels)] {
            Point::Row(row) => (row, true),
            Point::Near(start, end) => {
                let near = &lattice.neighbours[start as usize..end as usize];
                (
                    lattice.nearest(near, &self.xval[k], &self.waux[k], scale),
                    false,
                )
            }
        };
        fit.rows[k] = row;
        fit.levels[k] = lattice.rows[usize::from(row)];
        fit.on_grid[k] = on_grid;
    }

    /// `sum w x q` and `sum w q^2` over the sub-block, `q = 2 * level + 1`, in ggml's order.
    fn sums(&self, fit: &Fit<G>) -> (f32, f32) {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        let values = self
            .weight
            .as_flattened()
            .iter()
            .zip(self.xval.as_flattened());
        for ((&w, &x), &l) in values.zip(fit.levels.as_flattened()) {
            let q = f32::from(2 * l + 1);
            sumqx += w * x * q;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    }
}

/// Which IQ2 grid.
#[derive(Clone, Copy)]
enum Grid {
    Xxs,
    Xs,
    S,
}

/// A grid and the lookups ggml's `iq2xs_init_impl` builds for it.
struct Lattice {
    /// Each row's 8 levels, 0..=2.
    rows: Vec<[u8; 8]>,
    /// Every point of 8 levels, at [`point_key`]: the row it is, or the span of `neighbours`
    /// that lists the rows nearest it. Points with a level 3 are never looked up (levels are
    /// clamped to 0..=2) and have none.
    points: Vec<Point>,
    neighbours: Vec<u16>,
}

#[derive(Clone, Copy)]
enum Point {
    Row(u16),
    Near(u32, u32),
}

/// The lattice of `grid`, built on first use.
fn lattice(grid: Grid) -> &'static Lattice {
    static XXS: OnceLock<Lattice> = OnceLock::new();
    static XS: OnceLock<Lattice> = OnceLock::new();
    static S: OnceLock<Lattice> = OnceLock::new();
    // ggml keeps the rows at the two nearest distances, IQ2_S only those at the nearest.
    match grid {
        Grid::Xxs => XXS.get_or_init(|| Lattice::new(&IQ2XXS_PACKED, 2)),
        Grid::Xs => XS.get_or_init(|| Lattice::new(&IQ2XS_PACKED, 2)),
        Grid::S => S.get_or_init(|| Lattice::new(&IQ2S_PACKED, 1)),
    }
}

/// A point's index: its levels, 2 bits each, first lowest (ggml's `kmap_q2xs` index, and the
/// form the grids are packed in).
fn point_key(levels: &[u8; 8]) -> usize {
    levels
        .iter()
        .rev()
        .fold(0, |key, &l| key << 2 | usize::from(l))
}

impl Lattice {
    /// The lattice of the rows `packed`, each point off the grid listing the rows at its
    /// `nearest` smallest squared distances, by distance, then row.
    fn new(packed: &[u16], nearest: usize) -> Self {
        let rows: Vec<[u8; 8]> = packed
            .iter()
            .map(|&p| std::array::from_fn(|i| (p >> (2 * i) & 3) as u8))
            .collect();
        let mut points = vec![Point::Near(0, 0); 1 << 16];
        for (j, row) in rows.iter().enumerate() {
            points[point_key(row)] = Point::Row(j as u16);
        }
        let mut neighbours = Vec::new();
        for (key, point) in points.iter_mut().enumerate() {
            let levels: [u8; 8] = std::array::from_fn(|i| (key >> (2 * i) & 3) as u8);
            if matches!(point, Point::Row(_)) || levels.contains(&3) {
                continue;
            }
            let start = neighbours.len() as u32;
            neighbours.extend(nearest_rows(&rows, &levels, nearest));
            *point = Point::Near(start, neighbours.len() as u32);
        }
        Lattice {
            rows,
            points,
            neighbours,
        }
    }

    /// ggml's `iq2_find_best_neighbour`: the row of `candidates` whose values at `scale` are
    /// nearest the magnitudes `xval` in `weight`ed squares, the first of equals.
    fn nearest(&self, candidates: &[u16], xval: &[f32; 8], weight: &[f32; 8], scale: f32) -> u16 {
        let mut best = (f32::MAX, candidates.first().copied().unwrap_or(0));
        for &j in candidates {
            let row = &self.rows[usize::from(j)];
            let mut d2 = 0.0f32;
            for ((&l, &x), &w) in row.iter().zip(xval).zip(weight) {
                let diff = scale * f32::from(2 * l + 1) - x;
                d2 += w * diff * diff;
            }
            if d2 < best.0 {
                best = (d2, j);
            }
        }
        best.1
    }
}

/// The rows at the `nearest` smallest squared distances from `levels` (as ggml measures it,
/// between the values `2l + 1`), ordered by distance, then row.
fn nearest_rows(rows: &[[u8; 8]], levels: &[u8; 8], nearest: usize) -> Vec<u16> {
    let distance = |row: &[u8; 8]| -> usize {
        row.iter()
            .zip(levels)
            .map(|(&r, &l)| (2 * usize::from(r.abs_diff(l))).pow(2))
            .sum()
    };
    let distances: Vec<usize> = rows.iter().map(distance).collect();
    // Distances are at most 8 * 4^2.
    let mut present = [false; 129];
    for &d in &distances {
        present[d] = true;
    }
    let distinct: Vec<usize> = (0..present.len()).filter(|&d| present[d]).collect();
    let cut = distinct[(nearest - 1).min(distinct.len() - 1)];
    let mut near: Vec<(usize, u16)> = distances
        .iter()
        .enumerate()
        .filter(|(_, &d)| d <= cut)
        .map(|(j, &d)| (d, j as u16))
        .collect();
    near.sort_unstable();
    near.into_iter().map(|(_, j)| j).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::iq::iq_grid::{IQ2S, IQ2XS, IQ2XXS};

    #[test]
    fn lattice_rows_are_the_dequantization_grids() {
        // Levels 0, 1, 2 are the grids' magnitudes 8, 25, 43.
        const MAGNITUDE: [i8; 3] = [8, 25, 43];
        for (grid, table) in [
            (Grid::Xxs, &IQ2XXS[..]),
            (Grid::Xs, &IQ2XS[..]),
            (Grid::S, &IQ2S[..]),
        ] {
            let lattice = lattice(grid);
            assert_eq!(lattice.rows.len(), table.len());
            for (row, values) in lattice.rows.iter().zip(table) {
                assert_eq!(row.map(|l| MAGNITUDE[usize::from(l)]), *values);
            }
        }
    }

    #[test]
    fn every_reachable_point_is_a_row_or_has_neighbours() {
        for grid in [Grid::Xxs, Grid::Xs, Grid::S] {
            let lattice = lattice(grid);
            for key in 0..1usize << 16 {
                if (0..8).any(|i| key >> (2 * i) & 3 == 3) {
                    continue;
                }
                match lattice.points[key] {
                    Point::Row(r) => assert_eq!(point_key(&lattice.rows[usize::from(r)]), key),
                    Point::Near(start, end) => assert!(start < end, "{key:#x}"),
                }
            }
        }
    }

    #[test]
    fn zero_blocks_are_zero() {
        let zero = [0.0; QK_K];
        assert!(quantize_iq2_xxs(&zero, None).iter().all(|&b| b == 0));
        assert!(quantize_iq2_xs(&zero, None).iter().all(|&b| b == 0));
        assert!(quantize_iq2_s(&zero, None).iter().all(|&b| b == 0));
    }

    #[test]
    fn signs_stay_even_in_xxs() {
        let x: [f32; QK_K] = std::array::from_fn(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0);
        let block: BlockIq2Xxs = bytemuck::pod_read_unaligned(&quantize_iq2_xxs(&x, None));
        let mut out = [0.0; QK_K];
        block.dequantize(&mut out);
        for group in out.chunks_exact(8) {
            assert_eq!(group.iter().filter(|&&v| v < 0.0).count() % 2, 0);
        }
    }
}
