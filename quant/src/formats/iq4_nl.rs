//! IQ4_NL: blocks of 32 values in 18 bytes (4.5 bits per weight), each a 4-bit index into one
//! non-linear table of 16 signed levels ([`LEVELS`], denser near zero where weights are)
//! times the block's f16 scale: `value = d * LEVELS[q]`.
//!
//! The layout is GGUF's IQ4_NL byte for byte, and so are the blocks the quantizer writes: it
//! follows ggml's `quantize_iq4_nl`, as `llama-quantize` runs it (see [`BlockIq4Nl::quantize`]).
//! GLSL twin: `shaders/glsl/include/quant/iq4_nl.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;
use super::kquant::{importance_weight, signed_max, sum_squares, GROUP_MAX_EPS};
use super::Rounding;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// The levels, from ggml's `kvalues_iq4nl`.
pub const LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Scales the quantizer tries on each side of the first guess (ggml's `ntry`).
const TRIES: i32 = 7;

/// One block of 32 values (ggml's `block_iq4_nl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockIq4Nl {
    pub d: Half,
    /// Value `j < 16` indexes with the low nibble of `qs[j]`, value `j + 16` the high.
    pub qs: [u8; BLOCK_LEN / 2],
}

const _: () = assert!(size_of::<BlockIq4Nl>() == 18);

super::block_codec!(BlockIq4Nl, BLOCK_LEN);

impl BlockIq4Nl {
    /// The index of value `j` into [`LEVELS`].
    pub fn index(&self, j: usize) -> u8 {
        (self.qs[j % 16] >> (4 * (j / 16))) & 0x0F
    }

    /// Quantizes 32 finite values as `llama-quantize` does without an importance matrix
    /// (ggml's `quantize_iq4_nl`, each value weighted by its square), whatever `rounding`.
    pub fn quantize(src: &[f32; BLOCK_LEN], _rounding: Rounding) -> Self {
        Self::quantize_with_weights(src, &src.map(|x| x * x))
    }

    /// Quantizes 32 finite values with an importance per value (a column of llama.cpp's
    /// imatrix), as ggml's `quantize_iq4_nl` does given one: each value's error counts by its
    /// importance times `sqrt(sigma2 + x^2)`, `sigma2` twice the block's mean square.
    pub fn quantize_weighted(src: &[f32; BLOCK_LEN], importance: &[f32; BLOCK_LEN]) -> Self {
        let sigma2 = sum_squares(src) * (2.0 / BLOCK_LEN as f32);
        let weights = std::array::from_fn(|j| importance_weight(importance[j], sigma2, src[j]));
        Self::quantize_with_weights(src, &weights)
    }

    /// ggml's `quantize_row_iq4_nl_impl` for one block: the fitted scale ([`block_scale`]),
    /// stored as f16, and every value takes the level nearest it under that scale.
    fn quantize_with_weights(src: &[f32; BLOCK_LEN], weights: &[f32; BLOCK_LEN]) -> Self {
        let d = block_scale(src, weights);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        Self::pack(Half::from_f32(d), |j| nearest_level(id * src[j]))
    }

    /// The block with scale `d` and value `j`'s index `index(j)`.
    fn pack(d: Half, index: impl Fn(usize) -> u8) -> Self {
        let qs = std::array::from_fn(|j| index(j) | index(j + 16) << 4);
        BlockIq4Nl { d, qs }
    }

    /// Reference dot product of the dequantized values, summed in f64 in index order.
    pub fn dot(&self, x: &[f32; BLOCK_LEN]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }

    /// As ggml's `dequantize_row_iq4_nl`: `d * level`, in f32.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        levels_times(self.d.to_f32(), &self.qs, out);
    }
}

/// The scale of 32 values as ggml's `quantize_row_iq4_nl_impl` fits it (IQ4_NL's block scale,
/// and IQ4_XS's before its 6-bit rounding): the scale that maps the value of largest
/// magnitude to the outermost level, refitted by weighted least squares, then fifteen scales
/// around it, each with the levels nearest its values and refitted; the best fit wins. Zero
/// for a block whose largest magnitude is below [`GROUP_MAX_EPS`].
pub(crate) fn block_scale(src: &[f32; BLOCK_LEN], weights: &[f32; BLOCK_LEN]) -> f32 {
    let (amax, max) = signed_max(src);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let outer = f32::from(LEVELS[0]);
    // (sum w q x, sum w q^2) of the levels that the inverse scale `id` gives.
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for (&x, &w) in src.iter().zip(weights) {
            let q = f32::from(LEVELS[usize::from(nearest_level(id * x))]);
            sumqx += w * q * x;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let (sumqx, sumq2) = sums(1.0 / (-max / outer));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -TRIES..=TRIES {
        let (sumqx, sumq2) = sums((itry + i32::from(LEVELS[0])) as f32 / max);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// `out[j] = d * LEVELS[index j]` for 32 values packed in 16 bytes as IQ4_NL packs them.
pub fn levels_times(d: f32, qs: &[u8], out: &mut [f32; BLOCK_LEN]) {
    let (lo, hi) = out.split_at_mut(16);
    for ((&q, lo), hi) in qs.iter().zip(lo).zip(hi) {
        *lo = d * f32::from(LEVELS[usize::from(q & 0x0F)]);
        *hi = d * f32::from(LEVELS[usize::from(q >> 4)]);
    }
}

/// The index of the level nearest `x` (ggml's `best_index_int8`: the lower one on a tie).
pub(crate) fn nearest_level(x: f32) -> u8 {
    let last = LEVELS.len() - 1;
    if x <= f32::from(LEVELS[0]) {
        return 0;
    }
    if x >= f32::from(LEVELS[last]) {
        return last as u8;
    }
    let (mut lo, mut hi) = (0, last);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < f32::from(LEVELS[mid]) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let below = x - f32::from(LEVELS[hi - 1]) < f32::from(LEVELS[hi]) - x;
    (if below { hi - 1 } else { hi }) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_level_takes_the_closer_and_clamps() {
        assert_eq!(nearest_level(-500.0), 0);
        assert_eq!(nearest_level(500.0), 15);
        assert_eq!(nearest_level(0.0), 8); // -10 is 10 away, 1 is 1 away
        assert_eq!(nearest_level(-4.5), 8); // 5.5 from 1, 5.5 from -10: not strictly nearer
        assert_eq!(nearest_level(-5.0), 7);
        assert_eq!(nearest_level(112.0), 15);
    }

    #[test]
    fn a_zero_block_is_zero() {
        let b = BlockIq4Nl::quantize(&[0.0; 32], Rounding::Search);
        let mut out = [1.0; 32];
        b.dequantize(&mut out);
        assert_eq!(out, [0.0; 32]);
    }
}
