//! ARM64 kernels with the dot-product extension (`sdot`: four sums of four signed byte
//! products per instruction): a row of levels against 8-bit activations, and panels of rows
//! against many tokens. Rust's `sdot` intrinsics are not stable yet, so the instruction comes
//! through `asm!`, in functions compiled for `dotprod`.
//!
//! `sdot` multiplies signed by signed bytes, so the panels' products read the tokens' own
//! levels (`ActRow::q`) and start each group's sums at zero; the bias the x86 kernels need
//! for their unsigned operand does not apply.
//!
//! Every function here requires that the caller checked the CPU's features and the sizes, as
//! `Kernels` does.

use std::arch::aarch64::*;
use std::arch::asm;

use super::LevelsRow;
use crate::act::ActRow;
use crate::panel::{Panel, STEP};

/// `acc` plus, per 32-bit lane, the dot product of its four bytes of `w` and of `a`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction of the dotprod extension, which this function is
    // compiled for and only called where the CPU reports it.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.16b",
            acc = inout(vreg) acc, w = in(vreg) w, a = in(vreg) a,
            options(pure, nomem, nostack),
        )
    };
    acc
}

/// `acc` plus, per 32-bit lane, the dot product of its four bytes of `w` with the four bytes
/// of 32-bit lane `L` of `a` (one token's four values, broadcast).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot_lane<const L: usize>(acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: as in `sdot`; L < 4 is the lane of a 128-bit register.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{lane}]",
            acc = inout(vreg) acc, w = in(vreg) w, a = in(vreg) a, lane = const L,
            options(pure, nomem, nostack),
        )
    };
    acc
}

/// `w . x` without the weights' bases: per 16 values, `d[g] * x.d[g / 2]` times the integer
/// sum, kept as four partial sums until the end.
///
/// # Safety
/// The CPU must report dotprod; `w.levels` and `x.q` hold the same multiple of 32 values,
/// `w.d` one per 16 and `x.d` one per 32.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn levels(w: LevelsRow, x: ActRow) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 2];
    for g in 0..w.levels.len() / 16 {
        // SAFETY: g < len / 16: 16 values from 16 g lie within both rows.
        let (lw, lx) = unsafe {
            (
                vld1q_s8(w.levels.as_ptr().add(16 * g)),
                vld1q_s8(x.q.as_ptr().add(16 * g)),
            )
        };
        let sums = vcvtq_f32_s32(sdot(vdupq_n_s32(0), lw, lx));
        acc[g % 2] = vfmaq_n_f32(acc[g % 2], sums, w.d[g] * x.d[g / 2]);
    }
    vaddvq_f32(vaddq_f32(acc[0], acc[1]))
}

/// Rows a panel holds for [`panel`]: two registers of four.
pub const LANES: usize = 8;

/// `out[t * LANES + lane]` = row `lane` of `p` . `xs[t]`, four values of every row and
/// token per step, a token's 16 values loaded once for four steps.
///
/// # Safety
/// The CPU must report dotprod; `p` consistent with `p.group == G` (a multiple of 16) and
/// `p.lanes == LANES`, every row of `xs` `p.cols` values long, and `out` `N * LANES` long.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn panel<const G: usize, const N: usize>(
    p: &Panel,
    xs: &[ActRow; N],
    out: &mut [f32],
) {
    let mut acc = [[vdupq_n_f32(0.0); 2]; N];
    for g in 0..p.cols / G {
        let mut sums = [[vdupq_n_s32(0); 2]; N];
        for quad in g * G / 16..(g + 1) * G / 16 {
            // SAFETY: quad < cols / 16: four steps of LANES * STEP levels from 4 quad lie
            // within the panel, and 16 values from 16 quad within every row of xs.
            unsafe {
                let w = |k: usize, half: usize| {
                    let at = ((4 * quad + k) * LANES + 4 * half) * STEP;
                    vld1q_s8(p.levels.as_ptr().add(at))
                };
                let w: [[int8x16_t; 2]; 4] = std::array::from_fn(|k| [w(k, 0), w(k, 1)]);
                for (sums, x) in sums.iter_mut().zip(xs) {
                    let a = vld1q_s8(x.q.as_ptr().add(16 * quad));
                    for (h, sum) in sums.iter_mut().enumerate() {
                        *sum = sdot_lane::<0>(*sum, w[0][h], a);
                        *sum = sdot_lane::<1>(*sum, w[1][h], a);
                        *sum = sdot_lane::<2>(*sum, w[2][h], a);
                        *sum = sdot_lane::<3>(*sum, w[3][h], a);
                    }
                }
            }
        }
        let first = g * G;
        for ((acc, sums), x) in acc.iter_mut().zip(sums).zip(xs) {
            let xd = x.d[first / 32];
            let total: f32 = x.sums[first / 16..(first + G) / 16].iter().sum();
            for (h, (acc, sum)) in acc.iter_mut().zip(sums).enumerate() {
                let at = g * LANES + 4 * h;
                // SAFETY: g < cols / G: four of the group's d and m from `at`.
                let (d, m) = unsafe {
                    (
                        vld1q_f32(p.d.as_ptr().add(at)),
                        vld1q_f32(p.m.as_ptr().add(at)),
                    )
                };
                *acc = vfmaq_f32(*acc, vcvtq_f32_s32(sum), vmulq_n_f32(d, xd));
                if p.has_base {
                    *acc = vfmaq_n_f32(*acc, m, total);
                }
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        for (h, acc) in acc.iter().enumerate() {
            // SAFETY: out holds N * LANES values.
            unsafe { vst1q_f32(out.as_mut_ptr().add(t * LANES + 4 * h), *acc) };
        }
    }
}
