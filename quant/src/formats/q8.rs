//! Q8: 8-bit symmetric quantization, blocks of 32 values in 34 bytes (8.5 bits per weight).
//!
//! `value = q * d` with `q` a signed byte and `d` the block's f16 scale. The layout is GGUF's
//! Q8_0 byte for byte, so Q8_0 tensors are used as they are. GLSL twin:
//! `shaders/glsl/include/quant/q8.glsl`.

use bytemuck::{Pod, Zeroable};

use super::f16::Half;

/// Values per block.
pub const BLOCK_LEN: usize = 32;

/// One block of 32 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct BlockQ8 {
    /// Scale.
    pub d: Half,
    /// Levels, one signed byte per value.
    pub qs: [i8; BLOCK_LEN],
}

const _: () = assert!(size_of::<BlockQ8>() == 34);

impl BlockQ8 {
    /// The block's 32 values, as ggml's `dequantize_row_q8_0`: `q * d` in f32.
    pub fn dequantize(&self, out: &mut [f32; BLOCK_LEN]) {
        let d = self.d.to_f32();
        for (&q, out) in self.qs.iter().zip(out) {
            *out = f32::from(q) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{bytes, dequantize_all};
    use crate::BlockType;

    #[test]
    fn worked_example() {
        let mut qs = [0i8; 32];
        qs[0] = 127;
        qs[1] = -128;
        qs[31] = -3;
        let block = BlockQ8 {
            d: Half::from_f32(0.25),
            qs,
        };
        let out = dequantize_all(BlockType::Q8_0, bytemuck::bytes_of(&block));
        assert_eq!(
            (out[0], out[1], out[2], out[31]),
            (31.75, -32.0, 0.0, -0.75)
        );
    }

    #[test]
    fn every_value_follows_the_formula() {
        let qs: [i8; 32] = bytemuck::cast(bytes::<32>(2));
        let block = BlockQ8 {
            d: Half::from_bits(0x1A3D),
            qs,
        };
        let d = block.d.to_f32();
        let out = dequantize_all(BlockType::Q8_0, bytemuck::bytes_of(&block));
        for (i, got) in out.iter().enumerate() {
            assert_eq!(got.to_bits(), (qs[i] as f32 * d).to_bits(), "value {i}");
        }
    }
}
