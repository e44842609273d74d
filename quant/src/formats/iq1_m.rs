//! IQ1_M: super-blocks of 256 values in 56 bytes (1.75 bits per weight), ggml's layout
//! byte for byte: each 8 values a row of IQ1_S's grid with its own ±1/8 shift, each 16 a 3-bit scale, and the f16 `d` spread over the scales' top nibbles: `value = d * (2s + 1) * (grid ± 1/8)`.
//!
//! The block struct and its dequantization (ggml's operation order) are in
//! [`crate::formats::iq::iq1`]; its levels (the signed grid values, and a scale per 16) are what
//! the kernels and the CPU executor compute with. The quantizer is ggml's
//! ([`crate::formats::iq::iq1_quantize`]). GLSL twin: `shaders/glsl/include/quant/iq1_m.glsl`.

use super::kquant::QK_K;
use super::Rounding;
pub use crate::formats::iq::iq1::BlockIq1M;
use crate::formats::iq::iq1_quantize::quantize_iq1_m;

super::block_codec!(BlockIq1M, QK_K);

impl BlockIq1M {
    /// Quantizes 256 finite values as ggml's quantizer does without an importance matrix every column counts the same (llama-quantize requires a matrix for this type; ggml's quantizer asserts one), whatever `rounding`.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        bytemuck::pod_read_unaligned(&quantize_iq1_m(src, None))
    }

    /// Quantizes 256 finite values with an importance per value (a column of llama.cpp's
    /// imatrix), as ggml's quantizer does given one.
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        bytemuck::pod_read_unaligned(&quantize_iq1_m(src, Some(importance)))
    }

    /// Reference dot product of the dequantized values, summed in f64 in index order.
    pub fn dot(&self, x: &[f32; QK_K]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}
