//! IQ3_S: super-blocks of 256 values in 110 bytes (3.44 bits per weight), ggml's layout
//! byte for byte: each 4 values a row of a grid of 512 odd magnitudes (1..=15), 8 sign bits per 8, each 32 a 4-bit scale: `value = d * (1 + 2s) * grid * sign`.
//!
//! The block struct and its dequantization (ggml's operation order) are in
//! [`crate::formats::iq::iq3`]; its levels (the signed grid values, and a scale per 16) are what
//! the kernels and the CPU executor compute with. The quantizer is ggml's
//! ([`crate::formats::iq::iq3_quantize`]). GLSL twin: `shaders/glsl/include/quant/iq3_s.glsl`.

use super::kquant::QK_K;
use super::Rounding;
pub use crate::formats::iq::iq3::BlockIq3S;
use crate::formats::iq::iq3_quantize::quantize_iq3_s;

super::block_codec!(BlockIq3S, QK_K);

impl BlockIq3S {
    /// Quantizes 256 finite values as ggml's quantizer does without an importance matrix each value weighs as ggml's no-matrix path has it, whatever `rounding`.
    pub fn quantize(src: &[f32; QK_K], _rounding: Rounding) -> Self {
        bytemuck::pod_read_unaligned(&quantize_iq3_s(src, None))
    }

    /// Quantizes 256 finite values with an importance per value (a column of llama.cpp's
    /// imatrix), as ggml's quantizer does given one.
    pub fn quantize_weighted(src: &[f32; QK_K], importance: &[f32; QK_K]) -> Self {
        bytemuck::pod_read_unaligned(&quantize_iq3_s(src, Some(importance)))
    }

    /// Reference dot product of the dequantized values, summed in f64 in index order.
    pub fn dot(&self, x: &[f32; QK_K]) -> f64 {
        super::dot_block(|w| self.dequantize(w), x)
    }
}
