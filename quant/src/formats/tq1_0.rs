//! TQ1_0: ternary super-blocks of 256 values (-1, 0, 1 times one scale, as BitNet b1.58
//! models store them) in 54 bytes (1.6875 bits per weight), ggml's layout byte for byte:
//! five base-3 digits a byte (as a fixed-point fraction of 3^5) for the first 240 values and four for the last 16, then the f16 scale `d`: `value = d * (digit - 1)`.
//!
//! The block struct and its dequantization are in [`crate::formats::ternary`]; its levels (-1, 0,
//! 1, and the scale once per 16) are what the kernels and the CPU executor compute with. The
//! quantizer is ggml's reference one, which takes no importance matrix.
//! GLSL twin: `shaders/glsl/include/quant/tq1_0.glsl`.

use super::kquant::QK_K;
use super::Rounding;
pub use crate::formats::ternary::BlockTq1_0;

super::block_codec!(BlockTq1_0, QK_K);

impl BlockTq1_0 {
    /// Quantizes 256 finite values as ggml's `quantize_row_tq1_0_ref` does, whatever
    /// `rounding`.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        Self::quantize_ref(src)
    }

    /// Reference dot product of the dequantized values, summed in f64 in index order.
    pub fn dot(&self, x: &[f32; QK_K]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}
