//! IQ2_S: super-blocks of 256 values in 82 bytes (2.56 bits per weight), ggml's layout
//! byte for byte: each 8 values a row of a grid of 1024 magnitudes (8, 25, 43) with 8 sign bits, each 16 a 4-bit scale: `value = d * (0.5 + s) / 4 * grid * sign`.
//!
//! The block struct and its dequantization (ggml's operation order) are in
//! [`crate::formats::iq::iq2`]; its levels (the signed grid values, and a scale per 16) are what
//! the kernels and the CPU executor compute with. The quantizer is ggml's
//! ([`crate::formats::iq::iq2_quantize`]). GLSL twin: `shaders/glsl/include/quant/iq2_s.glsl`.

use super::kquant::QK_K;
use super::Rounding;
pub use crate::formats::iq::iq2::BlockIq2S;
use crate::formats::iq::iq2_quantize::quantize_iq2_s;

super::block_codec!(BlockIq2S, QK_K);

impl BlockIq2S {
    /// Quantizes 256 finite values as ggml's quantizer does without an importance matrix every column counts the same (llama-quantize requires a matrix for this type; ggml's quantizer asserts one), whatever `rounding`.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        bytemuck::pod_read_unaligned(&quantize_iq2_s(src, None))
    }

    /// Quantizes 256 finite values with an importance per value (a column of llama.cpp's
    /// imatrix), as ggml's quantizer does given one.
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        bytemuck::pod_read_unaligned(&quantize_iq2_s(src, Some(importance)))
    }

    /// Reference dot product of the dequantized values, summed in f64 in index order.
    pub fn dot(&self, x: &[f32; QK_K]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}
