//! x86-64 kernels: AVX2, AVX-VNNI and AVX-512 VNNI.
//!
//! Integer products multiply an unsigned byte by a signed one (`vpmaddubsw`, `vpdpbusd`), so
//! each weight level goes in as its absolute value and its sign moves onto the activation:
//! `|w| * (q * sign(w)) = w * q`. Levels and activations are within -127..=127, so a pair of
//! products (at most 2 * 127 * 127) never saturates `vpmaddubsw`'s 16 bits.
//!
//! In a 32-value chunk, 32-bit lane `i` sums bytes `4i..4i + 4`: lanes 0-3 are the chunk's
//! first 16 values and 4-7 its second, so one float vector of `d * xd` per chunk, four lanes
//! per half, scales both halves at once.
//!
//! Every function here requires that the caller checked the CPU's features (see
//! [`Kernels::new`](super::Kernels::new)) and the slices' lengths (a multiple of 32 levels,
//! `d` and `m` one per 16, activations' `d` one per 32).

use std::arch::x86_64::*;

use super::LevelsRow;
use crate::act::ActRow;

/// The 32 bytes at `p`.
///
/// # Safety
/// `p..p + 32` must be readable.
#[inline(always)]
unsafe fn load32(p: *const i8) -> __m256i {
    // SAFETY: the caller guarantees 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

/// Sum of the eight lanes.
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Chunk `c`'s scales: `d[2c] * xd` in lanes 0-3, `d[2c + 1] * xd` in lanes 4-7.
#[target_feature(enable = "avx2,fma")]
fn chunk_scales(w: &LevelsRow, x: &ActRow, c: usize) -> __m256 {
    let xd = x.d[c];
    _mm256_set_m128(
        _mm_set1_ps(w.d[2 * c + 1] * xd),
        _mm_set1_ps(w.d[2 * c] * xd),
    )
}

/// Chunk `c`'s products in eight 32-bit lanes, with `vpmaddubsw`.
///
/// # Safety
/// Chunk `c` must be within both rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn chunk_avx2(w: &LevelsRow, x: &ActRow, c: usize) -> __m256i {
    // SAFETY: the caller guarantees chunk c lies within both rows.
    let (lw, lx) = unsafe {
        (
            load32(w.levels.as_ptr().add(32 * c)),
            load32(x.q.as_ptr().add(32 * c)),
        )
    };
    let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(lw, lw), _mm256_sign_epi8(lx, lw));
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// # Safety
/// See the module's header.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn levels_avx2(w: LevelsRow, x: ActRow) -> f32 {
    let chunks = w.levels.len() / 32;
    let mut acc = [_mm256_setzero_ps(); 2];
    for c in 0..chunks {
        // SAFETY: c < chunks, and both rows hold 32 * chunks values.
        let sums = unsafe { chunk_avx2(&w, &x, c) };
        let a = &mut acc[c % 2];
        *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), chunk_scales(&w, &x, c), *a);
    }
    hsum(_mm256_add_ps(acc[0], acc[1]))
}

/// # Safety
/// See the module's header.
#[target_feature(enable = "avx2,fma,avxvnni")]
pub(super) unsafe fn levels_avxvnni(w: LevelsRow, x: ActRow) -> f32 {
    let chunks = w.levels.len() / 32;
    let mut acc = [_mm256_setzero_ps(); 2];
    for c in 0..chunks {
        // SAFETY: c < chunks, and both rows hold 32 * chunks values.
        let (lw, lx) = unsafe {
            (
                load32(w.levels.as_ptr().add(32 * c)),
                load32(x.q.as_ptr().add(32 * c)),
            )
        };
        let sums = _mm256_dpbusd_avx_epi32(
            _mm256_setzero_si256(),
            _mm256_sign_epi8(lw, lw),
            _mm256_sign_epi8(lx, lw),
        );
        let a = &mut acc[c % 2];
        *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), chunk_scales(&w, &x, c), *a);
    }
    hsum(_mm256_add_ps(acc[0], acc[1]))
}

/// Two chunks (64 values) a step: sixteen 32-bit lanes, four per 16 values.
///
/// # Safety
/// See the module's header.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn levels_avx512vnni(w: LevelsRow, x: ActRow) -> f32 {
    let chunks = w.levels.len() / 32;
    let pairs = chunks / 2;
    // Lane i takes scale i / 4.
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    let mut acc = _mm512_setzero_ps();
    for p in 0..pairs {
        // SAFETY: p < pairs: 64 values from 64 * p lie within both rows, and `d` holds the
        // four scales from 4 * p.
        let (lw, lx, d) = unsafe {
            (
                _mm512_loadu_si512(w.levels.as_ptr().add(64 * p).cast()),
                _mm512_loadu_si512(x.q.as_ptr().add(64 * p).cast()),
                _mm_loadu_ps(w.d.as_ptr().add(4 * p)),
            )
        };
        let negative = _mm512_movepi8_mask(lw);
        let signed_x = _mm512_mask_sub_epi8(lx, negative, _mm512_setzero_si512(), lx);
        let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(lw), signed_x);
        let (xd0, xd1) = (x.d[2 * p], x.d[2 * p + 1]);
        let scales = _mm_mul_ps(d, _mm_setr_ps(xd0, xd0, xd1, xd1));
        let scales = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(scales));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scales, acc);
    }
    let mut total = _mm512_reduce_add_ps(acc);
    if chunks % 2 == 1 {
        let c = chunks - 1;
        // SAFETY: chunk c is the rows' last.
        let sums = unsafe { chunk_avx2(&w, &x, c) };
        total += hsum(_mm256_mul_ps(
            _mm256_cvtepi32_ps(sums),
            chunk_scales(&w, &x, c),
        ));
    }
    total
}

/// A row of levels with f32 activations: each 8 levels widened to f32 and dequantized with one
/// fused multiply-add (`level * d + m`), then multiplied into the running sums.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `x` holds as many values as `w` has levels, a multiple
/// of 16, and `w.d`, `w.m` one per 16.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn levels_f32_avx2(w: LevelsRow, x: &[f32]) -> f32 {
    let groups = w.levels.len() / 16;
    let mut acc = [_mm256_setzero_ps(); 2];
    for g in 0..groups {
        let (d, m) = (_mm256_set1_ps(w.d[g]), _mm256_set1_ps(w.m[g]));
        for (h, acc) in acc.iter_mut().enumerate() {
            let at = 16 * g + 8 * h;
            // SAFETY: at + 8 <= 16 * groups, within both rows.
            let (levels, xs) = unsafe {
                (
                    _mm_loadl_epi64(w.levels.as_ptr().add(at).cast()),
                    _mm256_loadu_ps(x.as_ptr().add(at)),
                )
            };
            let values = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(levels)), d, m);
            *acc = _mm256_fmadd_ps(values, xs, *acc);
        }
    }
    hsum(_mm256_add_ps(acc[0], acc[1]))
}

/// Dot product of two f32 rows of equal length, four vectors of running sums.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` and `b` must have equal lengths.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn floats_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [_mm256_setzero_ps(); 4];
    let steps = n / 32;
    for i in 0..steps {
        for (j, acc) in acc.iter_mut().enumerate() {
            let at = 32 * i + 8 * j;
            // SAFETY: at + 8 <= 32 * steps <= n.
            let (va, vb) = unsafe {
                (
                    _mm256_loadu_ps(a.as_ptr().add(at)),
                    _mm256_loadu_ps(b.as_ptr().add(at)),
                )
            };
            *acc = _mm256_fmadd_ps(va, vb, *acc);
        }
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let tail: f32 = a[32 * steps..n]
        .iter()
        .zip(&b[32 * steps..n])
        .map(|(x, y)| x * y)
        .sum();
    hsum(sum) + tail
}

/// `out += sum(w[p] * rows[p])` over rows of `out.len()` values: 64 columns at a time (fewer
/// at the end) held in registers across every row, so `out` is read and written once and
/// eight independent multiply-adds are in flight.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `rows` holds `w.len()` rows of `out.len()` values.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn weighted_sum_avx2(w: &[f32], rows: &[f32], out: &mut [f32]) {
    let width = out.len();
    let mut col = 0;
    while col + 8 <= width {
        // SAFETY: each arm's columns end at or before `width`; the caller guarantees the
        // rows.
        col += unsafe {
            match width - col {
                64.. => weighted_columns::<8>(w, rows, out, col),
                32.. => weighted_columns::<4>(w, rows, out, col),
                _ => weighted_columns::<1>(w, rows, out, col),
            }
        };
    }
    for (j, o) in out.iter_mut().enumerate().skip(col) {
        for (p, &wp) in w.iter().enumerate() {
            *o += wp * rows[p * width + j];
        }
    }
}

/// [`weighted_sum_avx2`] for columns `col..col + 8 V`; returns how many it took.
///
/// # Safety
/// As [`weighted_sum_avx2`], and `col + 8 V <= out.len()`.
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_columns<const V: usize>(
    w: &[f32],
    rows: &[f32],
    out: &mut [f32],
    col: usize,
) -> usize {
    let width = out.len();
    // SAFETY: col + 8 V <= width.
    let mut acc: [__m256; V] =
        std::array::from_fn(|j| unsafe { _mm256_loadu_ps(out.as_ptr().add(col + 8 * j)) });
    for (p, &wp) in w.iter().enumerate() {
        let wp = _mm256_set1_ps(wp);
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: row p lies within rows, and col + 8 (j + 1) <= width.
            let v = unsafe { _mm256_loadu_ps(rows.as_ptr().add(p * width + col + 8 * j)) };
            *acc = _mm256_fmadd_ps(wp, v, *acc);
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        // SAFETY: as for the loads.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(col + 8 * j), *acc) };
    }
    8 * V
}

/// `out[p] = q . rows[p]` over rows of `q.len()` values (attention's scores): four rows at a
/// time, each with its own running sums, reduced together at the end.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `rows` holds `out.len()` rows of `q.len()` values.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dots_avx2(q: &[f32], rows: &[f32], out: &mut [f32]) {
    let width = q.len();
    let vectors = width / 8;
    let done = out.len() / 4 * 4;
    let mut quads = out.chunks_exact_mut(4);
    for (i, o) in quads.by_ref().enumerate() {
        let mut acc = [_mm256_setzero_ps(); 4];
        for v in 0..vectors {
            // SAFETY: 8 (v + 1) <= width, and rows 4 i..4 i + 4 lie within rows.
            unsafe {
                let qv = _mm256_loadu_ps(q.as_ptr().add(8 * v));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let at = (4 * i + r) * width + 8 * v;
                    *acc = _mm256_fmadd_ps(qv, _mm256_loadu_ps(rows.as_ptr().add(at)), *acc);
                }
            }
        }
        // The four sums, lane r holding row r's (each pair of adds halves the lanes).
        let s01 = _mm256_hadd_ps(acc[0], acc[1]);
        let s23 = _mm256_hadd_ps(acc[2], acc[3]);
        let s = _mm256_hadd_ps(s01, s23);
        let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let mut sums = [0f32; 4];
        // SAFETY: four floats.
        unsafe { _mm_storeu_ps(sums.as_mut_ptr(), s) };
        for (r, o) in o.iter_mut().enumerate() {
            let row = &rows[(4 * i + r) * width..][..width];
            let tail: f32 = q[8 * vectors..]
                .iter()
                .zip(&row[8 * vectors..])
                .map(|(a, b)| a * b)
                .sum();
            *o = sums[r] + tail;
        }
    }
    for (r, o) in quads.into_remainder().iter_mut().enumerate() {
        // SAFETY: the caller guarantees the lengths.
        *o = unsafe { floats_avx2(q, &rows[(done + r) * width..][..width]) };
    }
}

/// Dot product of a row of f16 weights (little-endian, as a file holds them) with f32
/// activations: each 8 weights widened with F16C and multiplied into four vectors of sums.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` holds `2 * x.len()` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_dot_avx2(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len();
    let mut acc = [_mm256_setzero_ps(); 4];
    let steps = n / 32;
    for i in 0..steps {
        for (j, acc) in acc.iter_mut().enumerate() {
            let at = 32 * i + 8 * j;
            // SAFETY: at + 8 <= 32 * steps <= n: 8 weights (16 bytes) and 8 values.
            let (vw, vx) = unsafe {
                (
                    _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(2 * at).cast())),
                    _mm256_loadu_ps(x.as_ptr().add(at)),
                )
            };
            *acc = _mm256_fmadd_ps(vw, vx, *acc);
        }
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let tail: f32 = w[64 * steps..2 * n]
        .chunks_exact(2)
        .zip(&x[32 * steps..])
        .map(|(b, &v)| half::f16::from_le_bytes([b[0], b[1]]).to_f32() * v)
        .sum();
    hsum(sum) + tail
}

/// `x` replaced by `exp(x - max)` (`max` at least every value), returning their sum: eight
/// at a time by Cephes' single-precision method (`2^n` times a degree-6 polynomial of the
/// remainder, within 2 ulp of `expf`), the rest by `expf`.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn exp_shifted_avx2(x: &mut [f32], max: f32) -> f32 {
    let shift = _mm256_set1_ps(max);
    let mut sum = _mm256_setzero_ps();
    let mut chunks = x.chunks_exact_mut(8);
    for c in chunks.by_ref() {
        // SAFETY: c holds eight floats.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        let e = exp_avx2(_mm256_sub_ps(v, shift));
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(c.as_mut_ptr(), e) };
        sum = _mm256_add_ps(sum, e);
    }
    let mut tail = 0.0;
    for v in chunks.into_remainder() {
        *v = (*v - max).exp();
        tail += *v;
    }
    hsum(sum) + tail
}

/// `exp(x)` for `x <= 0` in every lane (below -87.3, where `expf` leaves the normal numbers,
/// the result is that of -87.3: about 1e-38).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp_avx2(x: __m256) -> __m256 {
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.336_54));
    // x = n ln 2 + r, |r| <= ln 2 / 2, ln 2 in two parts so that r is exact.
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let p = _mm256_fmadd_ps(
        _mm256_mul_ps(p, r),
        r,
        _mm256_add_ps(r, _mm256_set1_ps(1.0)),
    );
    // 2^n from its exponent bits; n >= -126 after the clamp.
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(p, _mm256_castsi256_ps(pow2))
}
