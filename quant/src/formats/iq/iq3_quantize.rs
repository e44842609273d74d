//! IQ3_XXS and IQ3_S quantizers, writing super-blocks byte for byte as ggml's
//! `quantize_iq3_xxs` and `quantize_iq3_s` do (`quantize_row_iq3_xxs_impl` with the 256-point
//! grid, `quantize_row_iq3_s_impl` with 32-value sub-blocks), and so as `llama-quantize` does.
//!
//! Each 32 values are made non-negative (their signs stored apart), then a scale is searched:
//! for each trial scale every group of 4 values rounds to 3-bit levels, and a group whose levels
//! are not a grid point takes the nearest of a few neighbouring points (lists ggml's
//! `iq3xs_init_impl` builds once; here [`Grid`], built lazily). The best least-squares fit wins;
//! the 32s' scales are then stored as 4-bit multiples of the super-block's f16 scale.
//!
//! The floating-point operations are ggml's, in ggml's order, in f32 (the library ggml is built
//! into fuses no multiply-adds), so that the same bytes come out.

use std::sync::OnceLock;

use bytemuck::Zeroable;

use super::iq3::{BlockIq3S, BlockIq3Xxs};
use super::iq_grids::{IQ3S_PACKED, IQ3XXS_PACKED};
use crate::formats::f16::Half;
use crate::formats::kquant::{importance_weight, nearest_int, sum_squares, QK_K};

/// Bytes of an IQ3_XXS super-block.
pub const IQ3_XXS_BYTES: usize = size_of::<BlockIq3Xxs>();
/// Bytes of an IQ3_S super-block.
pub const IQ3_S_BYTES: usize = size_of::<BlockIq3S>();

/// Values that share one scale (ggml's sub-block; `IQ3S_BLOCK_SIZE` for IQ3_S).
const SUB: usize = 32;
/// Groups of 4 values (one grid point each) in a sub-block.
const GROUPS: usize = SUB / 4;
/// Levels per value: a grid value is `2l + 1` for a level `l` in 0..8 (ggml's `kMaxQ`).
const LEVELS: i32 = 8;

/// Quantizes 256 values to one IQ3_XXS super-block, as ggml's `quantize_iq3_xxs` does: with
/// `importance` (the block's 256 columns of an importance matrix), each value weighted by its
/// importance times `sqrt(sigma2 + x^2)`, `sigma2` twice the super-block's mean square; without
/// one (ggml's `quantize_row_iq3_xxs_ref`), by `x^2`.
pub fn quantize_iq3_xxs(x: &[f32; QK_K], importance: Option<&[f32; QK_K]>) -> [u8; IQ3_XXS_BYTES] {
    let mut block = BlockIq3Xxs::zeroed();
    let (points, aux) = block.qs.split_at_mut(QK_K / 4);
    let mut scales = [0.0f32; QK_K / SUB];
    let weights = Weights::new(x, importance);
    for (ib, xb) in x.chunks_exact(SUB).enumerate() {
        let weight = weights.sub_block(ib);
        let (mut xval, mut signs) = magnitudes(xb);
        even_signs(xb, &weight, &mut xval, &mut signs);
        let Some(fit) = fit_sub_block(&XXS, &xval, &weight) else {
            continue;
        };
        let mut packed = 0u32;
        for (k, &s) in signs.iter().enumerate() {
            // A negative scale (never seen) flips the signs; 7 of 8 bits are stored.
            let s = if fit.flipped { !s } else { s } & 127;
            packed |= u32::from(s) << (7 * k);
        }
        aux[4 * ib..4 * ib + 4].copy_from_slice(&packed.to_le_bytes());
        for (p, &index) in points[GROUPS * ib..].iter_mut().zip(&fit.points) {
            *p = index as u8;
        }
        scales[ib] = fit.scale;
    }
    let Some((d, levels)) = super_scale(&scales, 1.0125) else {
        // ggml drops the signs too: an all-zero block.
        return [0; IQ3_XXS_BYTES];
    };
    block.d = d;
    for (ib, l) in levels.into_iter().enumerate() {
        block.qs[QK_K / 4 + 4 * ib + 3] |= l << 4;
    }
    bytes(&block)
}

/// Quantizes 256 values to one IQ3_S super-block, as ggml's `quantize_iq3_s` does (32-value
/// sub-blocks): with `importance` (the block's 256 columns of an importance matrix), each value
/// weighted by its importance times `sqrt(sigma2 + x^2)`, `sigma2` twice the super-block's mean
/// square; without one (ggml's `quantize_row_iq3_s_ref`), by `x^2`.
pub fn quantize_iq3_s(x: &[f32; QK_K], importance: Option<&[f32; QK_K]>) -> [u8; IQ3_S_BYTES] {
    let mut block = BlockIq3S::zeroed();
    let mut scales = [0.0f32; QK_K / SUB];
    let weights = Weights::new(x, importance);
    // ggml advances its low-index and sign pointers only past a sub-block it quantizes, so
    // after an all-zero 32 the later ones are stored that many places early (the ninth index
    // bits are placed by position). Kept, for the same bytes.
    let mut written = 0;
    for (ib, xb) in x.chunks_exact(SUB).enumerate() {
        let weight = weights.sub_block(ib);
        let (xval, signs) = magnitudes(xb);
        let Some(fit) = fit_sub_block(&S, &xval, &weight) else {
            continue;
        };
        for (k, &index) in fit.points.iter().enumerate() {
            block.qs[GROUPS * written + k] = index as u8;
            block.qh[ib] |= ((index >> 8) as u8) << k;
        }
        for (k, &s) in signs.iter().enumerate() {
            block.signs[SUB / 8 * written + k] = if fit.flipped { !s } else { s };
        }
        written += 1;
        scales[ib] = fit.scale;
    }
    let Some((d, levels)) = super_scale(&scales, 1.033) else {
        // ggml leaves d zero but keeps what it stored.
        return bytes(&block);
    };
    block.d = d;
    for (ib, l) in levels.into_iter().enumerate() {
        block.scales[ib / 2] |= l << (4 * (ib % 2));
    }
    bytes(&block)
}

/// A block's bytes as GGUF stores them.
fn bytes<B: bytemuck::Pod, const N: usize>(block: &B) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(bytemuck::bytes_of(block));
    out
}

/// The weights of a super-block's values: an importance matrix's, or the values' squares.
struct Weights<'a> {
    x: &'a [f32; QK_K],
    importance: Option<&'a [f32; QK_K]>,
    sigma2: f32,
}

impl<'a> Weights<'a> {
    fn new(x: &'a [f32; QK_K], importance: Option<&'a [f32; QK_K]>) -> Self {
        let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
        Weights {
            x,
            importance,
            sigma2,
        }
    }

    /// Sub-block `ib`'s weights.
    fn sub_block(&self, ib: usize) -> [f32; SUB] {
        std::array::from_fn(|i| {
            let j = SUB * ib + i;
            let x = self.x[j];
            match self.importance {
                Some(importance) => importance_weight(importance[j], self.sigma2, x),
                None => x * x,
            }
        })
    }
}

/// The magnitudes of 32 values and each 8's signs, bit `i` set where value `i` is negative
/// (`-0.0` counts as positive, as ggml's `x >= 0`).
fn magnitudes(xb: &[f32]) -> ([f32; SUB], [u8; SUB / 8]) {
    let mut signs = [0u8; SUB / 8];
    let xval = std::array::from_fn(|i| {
        let v = xb[i];
        if v >= 0.0 {
            v
        } else {
            signs[i / 8] |= 1 << (i % 8);
            -v
        }
    });
    (xval, signs)
}

/// IQ3_XXS stores 7 sign bits per 8 and implies the eighth by even parity, so an 8 with an odd
/// number of negatives flips the sign of its least important value (least `w x^2`, the first on
/// ties): its magnitude goes negative, to be fitted as such.
fn even_signs(xb: &[f32], weight: &[f32; SUB], xval: &mut [f32; SUB], signs: &mut [u8; SUB / 8]) {
    for (k, s) in signs.iter_mut().enumerate() {
        if s.count_ones() % 2 == 0 {
            continue;
        }
        let cost = |i: usize| weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
        let mut imin = 0;
        let mut min = cost(0);
        for i in 1..8 {
            if cost(i) < min {
                min = cost(i);
                imin = i;
            }
        }
        xval[8 * k + imin] = -xval[8 * k + imin];
        *s ^= 1 << imin;
    }
}

/// What differs between the two types' sub-block searches.
struct Search {
    grid: fn() -> &'static Grid,
    /// Trial scales `max / (15 + 0.2 s)` for `s` in `-steps..=steps`.
    steps: i32,
    /// A sub-block whose largest magnitude is zero or below this is zero.
    zero_below: f32,
    /// Whether the final refit re-rounds every group (IQ3_S) or only those the best trial put
    /// off the grid (IQ3_XXS).
    refit_all: bool,
}

/// IQ3_XXS: the 256-point grid, 31 trial scales (ggml's `GROUP_MAX_EPS_IQ3_XXS` for zero).
const XXS: Search = Search {
    grid: grid_256,
    steps: 15,
    zero_below: 1e-8,
    refit_all: false,
};

/// IQ3_S: the 512-point grid, 19 trial scales, zero only when exactly zero (its magnitudes are
/// never negative).
const S: Search = Search {
    grid: grid_512,
    steps: 9,
    zero_below: 0.0,
    refit_all: true,
};

/// A sub-block's fit: its scale (non-negative) and each group's grid point.
struct Fit {
    scale: f32,
    points: [u16; GROUPS],
    /// The fit came out negative and was negated: the signs must be flipped.
    flipped: bool,
}

/// ggml's scale search for one sub-block of magnitudes `xval` with weights `weight`; `None`
/// for a zero sub-block.
fn fit_sub_block(search: &Search, xval: &[f32; SUB], weight: &[f32; SUB]) -> Option<Fit> {
    let grid = (search.grid)();
    // ggml's MAX(max, x): the later value unless the running one is greater.
    let max = xval[1..]
        .iter()
        .fold(xval[0], |m, &v| if m > v { m } else { v });
    if max < search.zero_below || max == 0.0 {
        return None;
    }
    let waux = weight.map(f32::sqrt);
    let mut best = 0.0f32;
    let mut scale = max / (2 * LEVELS - 1) as f32;
    let mut points = [0u16; GROUPS];
    // IQ3_XXS starts every group "on the grid" (nothing to refit if no trial is kept);
    // IQ3_S starts them off it.
    let mut on_grid = [!search.refit_all; GROUPS];
    for is in -search.steps..=search.steps {
        let id = ((2 * LEVELS - 1) as f32 + is as f32 * 0.2) / max;
        let this_scale = 1.0 / id;
        let mut trial = [0u16; GROUPS];
        let mut trial_on_grid = [true; GROUPS];
        for k in 0..GROUPS {
            (trial[k], trial_on_grid[k]) =
                grid.snap(group(xval, k), group(&waux, k), id, this_scale);
        }
        let (sumqx, sumq2) = grid.sums(xval, weight, &trial);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            points = trial;
            on_grid = trial_on_grid;
        }
    }
    if on_grid.contains(&false) && scale > 0.0 {
        let id = 1.0 / scale;
        for k in 0..GROUPS {
            if search.refit_all || !on_grid[k] {
                points[k] = grid.snap(group(xval, k), group(&waux, k), id, scale).0;
            }
        }
        let (sumqx, sumq2) = grid.sums(xval, weight, &points);
        if sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    let flipped = scale < 0.0;
    Some(Fit {
        scale: if flipped { -scale } else { scale },
        points,
        flipped,
    })
}

/// Group `k`'s 4 values.
fn group(values: &[f32; SUB], k: usize) -> &[f32] {
    &values[4 * k..4 * k + 4]
}

/// The super-block scale `d = max / 31` (stored times ggml's `fudge`) and each sub-block's 4-bit
/// multiple `l` of it, `scale ~ d (2l + 1)`; `None` when every sub-block is zero.
fn super_scale(scales: &[f32; QK_K / SUB], fudge: f32) -> Option<(Half, [u8; QK_K / SUB])> {
    let max_scale = scales
        .iter()
        .fold(0.0f32, |m, &s| if m > s { m } else { s });
    if max_scale == 0.0 {
        return None;
    }
    let d = max_scale / 31.0;
    let id = 1.0 / d;
    let levels = scales.map(|s| nearest_int(0.5 * (id * s - 1.0)).clamp(0, 15) as u8);
    Some((Half::from_f32(d * fudge), levels))
}

/// A 3-bit grid (ggml's `iq3_data` entry): its points' levels, and for each of the 4096 level
/// combinations either the point it is or the points nearest it.
struct Grid {
    /// Each point's 4 levels packed 3 bits apiece, first lowest: the grid of `iq_grids`.
    packed: &'static [u16],
    slots: Vec<Slot>,
}

/// A combination of 4 levels (packed 3 bits apiece): a grid point, or the grid points
/// nearest it.
enum Slot {
    On(u16),
    Off(Box<[u16]>),
}

/// IQ3_XXS's grid, each combination off it with its points at the 2 smallest distances.
fn grid_256() -> &'static Grid {
    static GRID: OnceLock<Grid> = OnceLock::new();
    GRID.get_or_init(|| Grid::new(&IQ3XXS_PACKED, 2))
}

/// IQ3_S's grid, each combination off it with its points at the 3 smallest distances.
fn grid_512() -> &'static Grid {
    static GRID: OnceLock<Grid> = OnceLock::new();
    GRID.get_or_init(|| Grid::new(&IQ3S_PACKED, 3))
}

impl Grid {
    /// ggml's `iq3xs_init_impl`: a combination off the grid gets every point within its
    /// `distances` smallest squared distances, ordered by distance and then index.
    fn new(packed: &'static [u16], distances: usize) -> Self {
        let mut slots: Vec<Option<Slot>> = (0..1usize << 12).map(|_| None).collect();
        for (i, &p) in packed.iter().enumerate() {
            slots[usize::from(p)] = Some(Slot::On(i as u16));
        }
        let slots = slots
            .into_iter()
            .enumerate()
            .map(|(u, slot)| {
                slot.unwrap_or_else(|| Slot::Off(nearest(packed, u as u16, distances)))
            })
            .collect();
        Grid { packed, slots }
    }

    /// Point `index`'s level for value `i`.
    fn level(&self, index: u16, i: usize) -> i32 {
        i32::from(self.packed[usize::from(index)] >> (3 * i) & 7)
    }

    /// The point for a group at inverse scale `id`: the one its rounded levels name, else the
    /// neighbour nearest at `scale`; and whether the levels were on the grid.
    fn snap(&self, x: &[f32], w: &[f32], id: f32, scale: f32) -> (u16, bool) {
        let mut u = 0u16;
        for (i, &v) in x.iter().enumerate() {
            let l = nearest_int(0.5 * (id * v - 1.0)).clamp(0, LEVELS - 1);
            u |= (l as u16) << (3 * i);
        }
        match &self.slots[usize::from(u)] {
            Slot::On(index) => (*index, true),
            Slot::Off(neighbours) => (self.best_neighbour(neighbours, x, w, scale), false),
        }
    }

    /// ggml's `iq3_find_best_neighbour`: the neighbour of least `sum (w (scale q - x))^2`
    /// (`w` the square roots of the weights), the first on ties.
    fn best_neighbour(&self, neighbours: &[u16], x: &[f32], w: &[f32], scale: f32) -> u16 {
        let mut best_d2 = f32::MAX;
        let mut best = neighbours[0];
        for &n in neighbours {
            let mut d2 = 0.0f32;
            for (i, (&x, &w)) in x.iter().zip(w).enumerate() {
                let q = (2 * self.level(n, i) + 1) as f32;
                let diff = scale * q - x;
                d2 += w * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                best = n;
            }
        }
        best
    }

    /// `sum w x q` and `sum w q^2` over a sub-block for grid points `points`, in ggml's order.
    fn sums(&self, xval: &[f32; SUB], weight: &[f32; SUB], points: &[u16; GROUPS]) -> (f32, f32) {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for i in 0..SUB {
            let w = weight[i];
            let q = (2 * self.level(points[i / 4], i % 4) + 1) as f32;
            sumqx += w * xval[i] * q;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    }
}

/// The points of `packed` nearest the levels `u`: all within the `distances` smallest squared
/// distances, by distance and then index. (ggml measures in grid values `2l + 1`; distances in
/// levels are a quarter of those, in the same order.)
fn nearest(packed: &[u16], u: u16, distances: usize) -> Box<[u16]> {
    let d2 = |p: u16| -> i32 {
        (0..4)
            .map(|i| {
                let diff = i32::from(p >> (3 * i) & 7) - i32::from(u >> (3 * i) & 7);
                diff * diff
            })
            .sum()
    };
    let mut by_distance: Vec<(i32, u16)> = packed
        .iter()
        .enumerate()
        .map(|(j, &p)| (d2(p), j as u16))
        .collect();
    by_distance.sort_unstable();
    let mut kept = Vec::new();
    let mut seen = 0;
    let mut last = None;
    for (d, j) in by_distance {
        if last != Some(d) {
            if seen == distances {
                break;
            }
            seen += 1;
            last = Some(d);
        }
        kept.push(j);
    }
    kept.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_blocks_are_zero() {
        assert_eq!(quantize_iq3_xxs(&[0.0; QK_K], None), [0; IQ3_XXS_BYTES]);
        assert_eq!(quantize_iq3_s(&[0.0; QK_K], None), [0; IQ3_S_BYTES]);
    }

    #[test]
    fn grids_map_their_points_and_list_neighbours() {
        for (grid, points) in [(grid_256(), 256), (grid_512(), 512)] {
            let on = grid
                .slots
                .iter()
                .filter(|s| matches!(s, Slot::On(_)))
                .count();
            assert_eq!(on, points);
            for (u, slot) in grid.slots.iter().enumerate() {
                match slot {
                    Slot::On(i) => assert_eq!(usize::from(grid.packed[usize::from(*i)]), u),
                    Slot::Off(n) => assert!(!n.is_empty()),
                }
            }
        }
    }

    /// The RMS error of dequantized `out` against `x`, relative to `x`'s RMS.
    fn relative_error(x: &[f32; QK_K], out: &[f32; QK_K]) -> f32 {
        let err: f32 = x.iter().zip(out).map(|(a, b)| (a - b) * (a - b)).sum();
        (err / sum_squares(x)).sqrt()
    }

    #[test]
    fn blocks_dequantize_near_their_values() {
        // A sum of sines: these blocks err by about 0.20 (IQ3_XXS) and 0.15 (IQ3_S) of the
        // values' RMS; IQ3_S, with its larger grid and 8 stored signs, must do better.
        let x: [f32; QK_K] = std::array::from_fn(|i| {
            let t = i as f32;
            (t * 0.37).sin() + 0.6 * (t * 1.91).sin() + 0.3 * (t * 0.053).cos()
        });
        let mut out = [0.0; QK_K];
        let b = quantize_iq3_xxs(&x, None);
        bytemuck::from_bytes::<BlockIq3Xxs>(&b).dequantize(&mut out);
        let xxs = relative_error(&x, &out);
        let b = quantize_iq3_s(&x, None);
        bytemuck::from_bytes::<BlockIq3S>(&b).dequantize(&mut out);
        let s = relative_error(&x, &out);
        assert!(xxs < 0.25 && s < 0.2 && s < xxs, "IQ3_XXS {xxs}, IQ3_S {s}");
    }
}
