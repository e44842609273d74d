//! x86-64 products of a [`Panel`] (one weight row per 32-bit lane, four interleaved levels
//! each) with `N` tokens at once: each step loads four levels of every row and, per token,
//! broadcasts its four unsigned bytes and adds their products into the lane's sum with one
//! `vpdpbusd` (AVX-512 VNNI on 512-bit registers, AVX-VNNI on 256-bit) or `vpmaddubsw` and
//! `vpmaddwd` (AVX2). The levels are loaded once for the `N` tokens.
//!
//! AVX2's `vpmaddubsw` saturates pairs of products at 16 bits: `2 * 255 * |level|` must fit,
//! so levels beyond +-64 (Q8's, the 4-bit i-quants' table) are not given to it
//! (`Kernels::panel_dot`, `levels::beyond_64`).
//!
//! Every function here requires that the caller checked the CPU's features and the sizes:
//! `p` consistent ([`Panel::is_consistent`]) with `p.group == G` and `p.lanes` the kernel's
//! lanes, every row of `xs` `p.cols` values long, and `out` `N * lanes` long.

use std::arch::x86_64::*;

use crate::act::ActRow;
use crate::panel::{Panel, STEP};

/// A module `$name` with `panel::<G, N>` for one register width and one way of adding
/// unsigned-by-signed byte products into 32-bit sums.
macro_rules! panel {
    (
        $features:literal, $name:ident, $lanes:literal,
        $vi:ty, $vf:ty, $zero:ident, $loadi:ident, $set1i:ident, $cvt:ident,
        $loadf:ident, $set1f:ident, $mul:ident, $fma:ident, $storef:ident, $dot:expr
    ) => {
        pub(super) mod $name {
            use super::*;

            /// Rows a panel holds for these kernels.
            pub const LANES: usize = $lanes;

            /// `sum` plus four byte products per lane of unsigned `a` and signed `w`.
            #[target_feature(enable = $features)]
            fn dot(sum: $vi, a: $vi, w: $vi) -> $vi {
                #[allow(clippy::redundant_closure_call)]
                ($dot)(sum, a, w)
            }

            /// `out[t * LANES + lane]` = row `lane` of `p` . `xs[t]`.
            ///
            /// # Safety
            /// See the module's header.
            #[target_feature(enable = $features)]
            pub unsafe fn panel<const G: usize, const N: usize>(
                p: &Panel,
                xs: &[ActRow; N],
                out: &mut [f32],
            ) {
                let mut acc: [$vf; N] = [$zero(); N];
                for g in 0..p.cols / G {
                    let at = g * LANES;
                    // SAFETY: g < cols / G: the group's bias, d and m lie within the
                    // panel's [cols / G][LANES] vectors.
                    let (bias, d, m) = unsafe {
                        (
                            $loadi(p.bias.as_ptr().add(at).cast()),
                            $loadf(p.d.as_ptr().add(at)),
                            $loadf(p.m.as_ptr().add(at)),
                        )
                    };
                    let mut sums = [bias; N];
                    for s in g * G / STEP..(g + 1) * G / STEP {
                        // SAFETY: s < cols / STEP: LANES * STEP levels from there lie within
                        // the panel, and STEP activation bytes within every row of xs.
                        unsafe {
                            let w = $loadi(p.levels.as_ptr().add(s * LANES * STEP).cast());
                            for (sum, x) in sums.iter_mut().zip(xs) {
                                let four = x.u.as_ptr().add(s * STEP).cast::<i32>();
                                *sum = dot(*sum, $set1i(four.read_unaligned()), w);
                            }
                        }
                    }
                    let first = g * G;
                    for ((acc, sum), x) in acc.iter_mut().zip(sums).zip(xs) {
                        let scale = $mul(d, $set1f(x.d[first / 32]));
                        *acc = $fma($cvt(sum), scale, *acc);
                        if p.has_base {
                            let total: f32 = x.sums[first / 16..(first + G) / 16].iter().sum();
                            *acc = $fma(m, $set1f(total), *acc);
                        }
                    }
                }
                for (t, acc) in acc.into_iter().enumerate() {
                    // SAFETY: out holds N * LANES values.
                    unsafe { $storef(out.as_mut_ptr().add(t * LANES), acc) };
                }
            }
        }
    };
}

panel!(
    "avx2,fma",
    avx2,
    8,
    __m256i,
    __m256,
    _mm256_setzero_ps,
    _mm256_loadu_si256,
    _mm256_set1_epi32,
    _mm256_cvtepi32_ps,
    _mm256_loadu_ps,
    _mm256_set1_ps,
    _mm256_mul_ps,
    _mm256_fmadd_ps,
    _mm256_storeu_ps,
    |sum, a, w| _mm256_add_epi32(
        sum,
        _mm256_madd_epi16(_mm256_maddubs_epi16(a, w), _mm256_set1_epi16(1))
    )
);

panel!(
    "avx2,fma,avxvnni",
    avxvnni,
    8,
    __m256i,
    __m256,
    _mm256_setzero_ps,
    _mm256_loadu_si256,
    _mm256_set1_epi32,
    _mm256_cvtepi32_ps,
    _mm256_loadu_ps,
    _mm256_set1_ps,
    _mm256_mul_ps,
    _mm256_fmadd_ps,
    _mm256_storeu_ps,
    |sum, a, w| _mm256_dpbusd_avx_epi32(sum, a, w)
);

panel!(
    "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni",
    avx512vnni,
    16,
    __m512i,
    __m512,
    _mm512_setzero_ps,
    _mm512_loadu_si512,
    _mm512_set1_epi32,
    _mm512_cvtepi32_ps,
    _mm512_loadu_ps,
    _mm512_set1_ps,
    _mm512_mul_ps,
    _mm512_fmadd_ps,
    _mm512_storeu_ps,
    |sum, a, w| _mm512_dpbusd_epi32(sum, a, w)
);
