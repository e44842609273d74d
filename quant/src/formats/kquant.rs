//! What the k-quants (Q2_K to Q6_K) share: the super-block geometry and the scale searches of
//! ggml's reference quantizers (`make_qx_quants`, `make_q3_quants`, `make_qkx2_quants` in
//! `ggml-quants.c`), written after the published algorithms and kept in the same floating-point
//! operation order, so a block comes out as ggml's reference quantizer makes it wherever the C
//! compiler does not fuse multiplies and adds.
//!
//! A super-block holds 256 values in sub-blocks of 16 or 32 values; each sub-block's scale
//! (and min) is stored in a few bits, themselves scaled by the super-block's f16 scale. The
//! searches take an importance weight per value: ggml's reference quantizers derive it from
//! the values themselves, and an importance matrix (llama.cpp's imatrix) can supply it instead.

/// Values per super-block.
pub const QK_K: usize = 256;

/// Bytes of packed 6-bit scales (and mins) in a Q3_K, Q4_K or Q5_K super-block.
pub const K_SCALE_SIZE: usize = 12;

/// Sub-blocks whose largest magnitude is below this are all zero (ggml's `GROUP_MAX_EPS`).
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// `x` rounded to the nearest integer, ties to even: ggml's `nearest_int`, which adds 1.5 * 2^23
/// so the float unit rounds. Saturates far outside the range ggml asserts (|x| < 2^22).
pub fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// The `N`-value sub-blocks of a super-block, in order.
pub fn sub_blocks<const N: usize>(src: &[f32; QK_K]) -> impl Iterator<Item = &[f32; N]> {
    src.chunks_exact(N).filter_map(|c| c.try_into().ok())
}

/// The sub-block's largest magnitude and the value that has it (the first, on ties).
pub(crate) fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// Symmetric levels `l` in `-nmax..nmax` for a sub-block, stored as `l + nmax` in `out`, and the
/// scale that goes with them (ggml's `make_qx_quants` with rmse_type 1): the scale `-max / nmax`
/// (`max` the value of largest magnitude) and nineteen scales around it, each with the levels it
/// rounds to and refitted by weighted least squares; the best fit wins. `weights` are the
/// importance of each value (ggml's reference uses `x^2`).
pub fn make_qx_quants(nmax: i32, x: &[f32], weights: &[f32], out: &mut [u8]) -> f32 {
    let (amax, max) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // (sum w x l, sum w l^2) of the levels that `iscale` gives.
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for (&v, &w) in x.iter().zip(weights) {
            let l = level(iscale, v) as f32;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let store = |iscale: f32, out: &mut [u8]| {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (level(iscale, v) + nmax) as u8;
        }
    };
    let iscale = -(nmax as f32) / max;
    store(iscale, out);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            store(iscale, out);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Symmetric levels for a Q3_K sub-block (ggml's `make_q3_quants` with do_rmse): levels from
/// the scale `-max / nmax`, then up to five passes that move single levels where that raises
/// the weighted (by `x^2`) least-squares fit. Levels are stored as `l + nmax`.
pub fn make_q3_quants(nmax: i32, x: &[f32], out: &mut [u8]) -> f32 {
    let (amax, max) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l = [0i32; 32];
    let l = &mut l[..x.len()];
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (l, &v) in l.iter_mut().zip(x) {
        *l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        let w = v * v;
        sumlx += w * v * *l as f32;
        suml2 += w * *l as f32 * *l as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let mut slx = sumlx - w * v * l[i] as f32;
            if slx <= 0.0 {
                continue;
            }
            let mut sl2 = suml2 - w * l[i] as f32 * l[i] as f32;
            let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
            if new_l == l[i] {
                continue;
            }
            slx += w * v * new_l as f32;
            sl2 += w * new_l as f32 * new_l as f32;
            if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                l[i] = new_l;
                sumlx = slx;
                suml2 = sl2;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for (o, &l) in out.iter_mut().zip(l.iter()) {
        *o = (l + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// How [`make_qkx2_quants`] searches: scales `(nmax + rmin + rdelta * i) / (max - min)` for `i`
/// in `0..=nstep`, errors as absolute (`use_mad`) or squared differences.
#[derive(Clone, Copy, Debug)]
pub struct Search {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// Asymmetric levels `0..=nmax` for a sub-block, with its scale (returned) and min (`value =
/// scale * q - min`, `min >= 0`): ggml's `make_qkx2_quants`. Starts from the min-max grid, then
/// tries `search.nstep + 1` grid widths, each refitted by weighted least squares (scale and
/// offset, the offset kept at or below zero), keeping the one with the least weighted error.
pub fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    out: &mut [u8],
    search: Search,
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let (mut sum_w, mut sum_x) = (weights[0], weights[0] * x[0]);
    for (&v, &w) in x.iter().zip(weights).skip(1) {
        min = min.min(v);
        max = max.max(v);
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        out.fill(0);
        return (0.0, -min);
    }
    let error = |scale: f32, min: f32, l: u8, v: f32| {
        let diff = scale * f32::from(l) + min - v;
        if search.use_mad {
            diff.abs()
        } else {
            diff * diff
        }
    };
    let level =
        |iscale: f32, min: f32, v: f32| nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weights) {
        *o = level(iscale, min, v);
        best_error += w * error(scale, min, *o, v);
    }
    if search.nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..x.len()];
    for is in 0..=search.nstep {
        let iscale = (search.rmin + search.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for ((a, &v), &w) in aux.iter_mut().zip(x).zip(weights) {
            *a = level(iscale, min, v);
            let l = f32::from(*a);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det <= 0.0 {
            continue;
        }
        let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if this_min > 0.0 {
            this_min = 0.0;
            this_scale = sum_xl / sum_l2;
        }
        let mut cur_error = 0.0f32;
        for ((&a, &v), &w) in aux.iter().zip(x).zip(weights) {
            cur_error += w * error(this_scale, this_min, a, v);
        }
        if cur_error < best_error {
            out.copy_from_slice(aux);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    (scale, -min)
}

/// The 6-bit scale and min of sub-block `j` (0..8) from the 12 packed bytes Q4_K and Q5_K share
/// (ggml's `get_scale_min_k4`). Sub-blocks 0..4 keep theirs in the low 6 bits of bytes `j`
/// (scale) and `j + 4` (min); sub-blocks 4..8 have their low 4 bits in the nibbles of byte
/// `j + 4` and their high 2 bits in the top bits of bytes `j - 4` (scale) and `j` (min).
pub fn scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and mins as [`scale_min_k4`] reads them.
pub fn pack_scale_min_k4(sc: &[u8; 8], mins: &[u8; 8]) -> [u8; K_SCALE_SIZE] {
    let mut out = [0u8; K_SCALE_SIZE];
    for j in 0..8 {
        let (ls, lm) = (sc[j] & 63, mins[j] & 63);
        if j < 4 {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            out[j - 4] |= (ls >> 4) << 6;
            out[j] |= (lm >> 4) << 6;
        }
    }
    out
}

/// The super-block scales of Q4_K and Q5_K from their eight sub-blocks' scales and mins
/// (each `>= 0`): `d = max scale / 63`, `dmin = max min / 63`, each sub-block's 6-bit scale and
/// min rounded against the unrounded maxima as ggml does. Returns `(d, dmin, packed)`.
pub fn quantize_scales_k4(
    scales: &[f32; 8],
    mins: &[f32; 8],
) -> (super::f16::Half, super::f16::Half, [u8; K_SCALE_SIZE]) {
    let max_scale = scales
        .iter()
        .fold(0.0f32, |a, &s| if s > a { s } else { a });
    let max_min = mins.iter().fold(0.0f32, |a, &m| if m > a { m } else { a });
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // As ggml: the rounded value is cut to a byte, then clamped to 63.
    let ls = scales.map(|s| (nearest_int(inv_scale * s) as u8).min(63));
    let lm = mins.map(|m| (nearest_int(inv_min * m) as u8).min(63));
    (
        super::f16::Half::from_f32(max_scale / 63.0),
        super::f16::Half::from_f32(max_min / 63.0),
        pack_scale_min_k4(&ls, &lm),
    )
}

/// Sub-block scales (or mins) `x`, all `>= 0` as the searches make them (IQ2_XXS's magnitudes
/// may have one negative), as levels `0..=nmax` of one super-block scale, which is returned
/// (ggml's `make_qp_quants`): the scale
/// `max / nmax` and eight near it, the best by the `weights`' squared error, then up to five
/// passes that move single levels where that raises the weighted least-squares fit.
pub fn make_qp_quants<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    out: &mut [u8; N],
) -> f32 {
    let max = x.iter().fold(0.0f32, |a, &v| a.max(v));
    if max < GROUP_MAX_EPS {
        *out = [0; N];
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    // As ggml, the first levels are not clamped and the error uses them as bytes.
    let first = x.map(|v| nearest_int(iscale * v) as u8);
    let scale = 1.0 / iscale;
    let mut best_mse = 0.0f32;
    for ((&v, &w), &l) in x.iter().zip(weights).zip(&first) {
        let diff = v - scale * f32::from(l);
        best_mse += w * diff * diff;
    }
    for is in (-4..=4).filter(|&is| is != 0) {
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0.0f32;
        for (&v, &w) in x.iter().zip(weights) {
            let l = nearest_int(iscale_is * v).min(nmax);
            let diff = v - scale_is * l as f32;
            mse += w * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    // ggml keeps the levels as bytes: a negative one (only where a caller passes a negative
    // x, as IQ2_XXS's sign parity can) is summed as an int first, then wraps in the passes.
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for ((&v, &w), stored) in x.iter().zip(weights).zip(out.iter_mut()) {
        let l = nearest_int(iscale * v).min(nmax);
        *stored = l as u8;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for ((&v, &w), stored) in x.iter().zip(weights).zip(out.iter_mut()) {
            let old = f32::from(*stored);
            let mut slx = sumlx - w * v * old;
            let mut sl2 = suml2 - w * old * old;
            if !(slx > 0.0 && sl2 > 0.0) {
                continue;
            }
            let new_l = nearest_int(v * sl2 / slx).min(nmax);
            if new_l == i32::from(*stored) {
                continue;
            }
            slx += w * v * new_l as f32;
            sl2 += w * new_l as f32 * new_l as f32;
            if slx * slx * suml2 > sumlx * sumlx * sl2 {
                *stored = new_l as u8;
                sumlx = slx;
                suml2 = sl2;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// ggml's search for asymmetric blocks with an importance matrix (`make_qkx3_quants` as
/// `quantize_row_q2_K_impl`, `_q4_K_impl`, `_q5_K_impl`, `_q4_1_impl` and `_q5_1_impl` call it).
pub const WEIGHTED_SEARCH: Search = Search {
    rmin: -0.9,
    rdelta: 0.05,
    nstep: 36,
    use_mad: false,
};

/// A Q4_K or Q5_K super-block: `(d, dmin, packed scales and mins, levels 0..=nmax)`.
pub type K4Block = (
    super::f16::Half,
    super::f16::Half,
    [u8; K_SCALE_SIZE],
    [u8; QK_K],
);

/// A Q4_K or Q5_K super-block with levels `0..=nmax` from an importance per value, as ggml's
/// `quantize_row_q4_K_impl` and `quantize_row_q5_K_impl`: each value weighs its importance
/// times `sqrt(2 mean x^2 + x^2)`, each sub-block's scale and min are searched with those
/// weights, and the sub-block scales and mins become 6-bit levels of the super-block's by
/// [`make_qp_quants`] weighted by each sub-block's total weight.
pub fn quantize_k4_weighted(src: &[f32; QK_K], importance: &[f32; QK_K], nmax: i32) -> K4Block {
    let sigma2 = 2.0 * sum_squares(src) / QK_K as f32;
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins, mut sw) = ([0.0f32; 8], [0.0f32; 8], [0.0f32; 8]);
    let subs = sub_blocks::<32>(src).zip(importance.chunks_exact(32));
    for (j, ((x, qw), l)) in subs.zip(levels.chunks_exact_mut(32)).enumerate() {
        let mut weights = [0.0f32; 32];
        for ((w, &q), &v) in weights.iter_mut().zip(qw).zip(x) {
            *w = importance_weight(q, sigma2, v);
        }
        sw[j] = weights.iter().fold(0.0f32, |a, &w| a + w);
        (scales[j], mins[j]) = make_qkx2_quants(nmax, x, &weights, l, WEIGHTED_SEARCH);
    }
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d = super::f16::Half::from_f32(make_qp_quants(63, &scales, &sw, &mut ls));
    let dmin = super::f16::Half::from_f32(make_qp_quants(63, &mins, &sw, &mut lm));
    let packed = pack_scale_min_k4(&ls.map(|l| l.min(63)), &lm.map(|l| l.min(63)));
    requantize_k4(src, (d, dmin, packed, levels), nmax)
}

/// The Q4_K or Q5_K super-block with every level recomputed from the scales and mins as stored
/// (ggml's final pass); sub-blocks whose scale is zero keep the search's levels.
pub fn requantize_k4(src: &[f32; QK_K], block: K4Block, nmax: i32) -> K4Block {
    let (d, dmin, packed, mut levels) = block;
    for (j, (x, l)) in sub_blocks::<32>(src)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let (sc, m) = scale_min_k4(j, &packed);
        let dj = d.to_f32() * f32::from(sc);
        if dj != 0.0 {
            requantize_asymmetric(x, dj, dmin.to_f32() * f32::from(m), nmax, l);
        }
    }
    (d, dmin, packed, levels)
}

/// ggml's weights for a value `x` of importance `importance` in a block or row whose mean
/// square (or, for some formats, twice it) is `sigma2`: `importance * sqrt(sigma2 + x^2)`.
pub fn importance_weight(importance: f32, sigma2: f32, x: f32) -> f32 {
    importance * (sigma2 + x * x).sqrt()
}

/// `sum x^2` in f32, in order, as ggml's quantizers sum it.
pub fn sum_squares(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |a, &v| a + v * v)
}

/// ggml's per-value weights for the Q4_K and Q5_K sub-block searches without an importance
/// matrix: `sqrt(mean x^2) + |x|`.
pub fn rms_plus_abs(x: &[f32; 32]) -> [f32; 32] {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let av_x = (sum_x2 / 32.0).sqrt();
    x.map(|v| av_x + v.abs())
}

/// Levels `0..=nmax` for one sub-block with scale `d` and min `dm` as stored
/// (`q = round((x + dm) / d)`), where `d` is not zero; ggml's final pass.
pub fn requantize_asymmetric(x: &[f32], d: f32, dm: f32, nmax: i32, out: &mut [u8]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even_as_ggml() {
        // ggml adds 1.5 * 2^23 and reads the low mantissa bits.
        let ggml = |x: f32| ((x + 12582912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000;
        for x in [
            0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -7.51, 0.0, 4194303.0, 1e-30,
        ] {
            assert_eq!(nearest_int(x), ggml(x), "{x}");
        }
    }

    #[test]
    fn k4_scales_pack_and_unpack() {
        let sc: [u8; 8] = std::array::from_fn(|j| (j * 23 % 64) as u8);
        let mins: [u8; 8] = std::array::from_fn(|j| (63 - j * 9 % 64) as u8);
        let packed = pack_scale_min_k4(&sc, &mins);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &packed), (sc[j], mins[j]), "sub-block {j}");
        }
    }

    #[test]
    fn qkx2_fits_a_ramp_exactly() {
        // 0, 1, ..., 15 times 0.25 minus 1: a 4-bit grid fits it with no error.
        let x: [f32; 16] = std::array::from_fn(|i| i as f32 * 0.25 - 1.0);
        let w = [1.0f32; 16];
        let mut l = [0u8; 16];
        let search = Search {
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        let (scale, min) = make_qkx2_quants(15, &x, &w, &mut l, search);
        assert_eq!((scale, min), (0.25, 1.0));
        assert_eq!(l, std::array::from_fn(|i| i as u8));
    }

    #[test]
    fn qx_levels_are_symmetric_around_nmax() {
        let x: [f32; 16] = std::array::from_fn(|i| (i as f32 - 8.0) * 0.5);
        let w = x.map(|v| v * v);
        let mut l = [0u8; 16];
        let scale = make_qx_quants(32, &x, &w, &mut l);
        for (i, &q) in l.iter().enumerate() {
            let back = scale * (f32::from(q) - 32.0);
            assert!(
                (back - x[i]).abs() <= scale.abs() / 2.0 + 1e-6,
                "{i}: {back} {}",
                x[i]
            );
        }
    }
}
