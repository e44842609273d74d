//! Activations quantized to 8-bit blocks with AVX2, exactly as `ActQ8::quantize` does in plain
//! Rust: the same f32 scale and reciprocal, each value rounded to nearest (ties to even, the
//! default rounding of `vcvtps2dq`), and each 16 values' sum.

use std::arch::x86_64::*;

use crate::act::BLOCK;

/// One product's activations: `x` in blocks of 32 into `q`, `u` (`q + 128`), `d` (one per
/// block) and `sums` (two per block).
///
/// # Safety
/// The CPU must support AVX2; `x.len()` is a multiple of 32 and `q`, `u`, `d`, `sums` hold
/// `x.len()`, `x.len()`, `x.len() / 32` and `x.len() / 16` values.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_avx2(
    x: &[f32],
    q: &mut [i8],
    u: &mut [u8],
    d: &mut [f32],
    sums: &mut [f32],
) {
    let magnitude = _mm256_set1_ps(f32::from_bits(0x7FFF_FFFF));
    // Bytes of `packs` in value order: 32-bit lanes 0, 4, 1, 5, ...
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let flip = _mm256_set1_epi8(-128);
    for b in 0..x.len() / BLOCK {
        // SAFETY: block b's 32 values lie within x.
        let v: [__m256; 4] =
            std::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.as_ptr().add(BLOCK * b + 8 * i)) });
        let m = _mm256_max_ps(
            _mm256_max_ps(
                _mm256_and_ps(v[0], magnitude),
                _mm256_and_ps(v[1], magnitude),
            ),
            _mm256_max_ps(
                _mm256_and_ps(v[2], magnitude),
                _mm256_and_ps(v[3], magnitude),
            ),
        );
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let scale = amax / 127.0;
        let inv = _mm256_set1_ps(if amax > 0.0 { 127.0 / amax } else { 0.0 });
        let i = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, inv)));
        let packs = _mm256_packs_epi16(
            _mm256_packs_epi32(i[0], i[1]),
            _mm256_packs_epi32(i[2], i[3]),
        );
        let levels = _mm256_permutevar8x32_epi32(packs, order);
        // SAFETY: block b's 32 bytes lie within q and u.
        unsafe {
            _mm256_storeu_si256(q.as_mut_ptr().add(BLOCK * b).cast(), levels);
            let unsigned = _mm256_xor_si256(levels, flip);
            _mm256_storeu_si256(u.as_mut_ptr().add(BLOCK * b).cast(), unsigned);
        }
        d[b] = scale;
        for (h, pair) in [(i[0], i[1]), (i[2], i[3])].into_iter().enumerate() {
            let s = _mm256_add_epi32(pair.0, pair.1);
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
            sums[2 * b + h] = _mm_cvtsi128_si32(s) as f32 * scale;
        }
    }
}
