//! F16: IEEE half-precision values (GGUF type 1), and [`Half`], the f16 field type every block
//! format uses for its scales.

use std::fmt;

use bytemuck::{Pod, Zeroable};
use half::slice::HalfFloatSliceExt;

/// An IEEE half-precision float stored as its two little-endian bytes, as it appears in files
/// and on the device.
///
/// Byte storage gives alignment 1, so block structs that contain one can be viewed in place over
/// any byte slice, and it reads the same on any host. Equality compares bits (so `-0 != +0` and
/// a NaN equals itself), which is what a storage type needs.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct Half([u8; 2]);

impl Half {
    pub const ZERO: Half = Half([0; 2]);

    pub const fn from_bits(bits: u16) -> Self {
        Half(bits.to_le_bytes())
    }

    pub const fn to_bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }

    /// The nearest f16 (ties to even, as ggml's `GGML_FP32_TO_FP16`).
    pub fn from_f32(x: f32) -> Self {
        half::f16::from_f32(x).into()
    }

    /// The exact f32 value.
    pub fn to_f32(self) -> f32 {
        half::f16::from(self).to_f32()
    }
}

impl From<half::f16> for Half {
    fn from(x: half::f16) -> Self {
        Half::from_bits(x.to_bits())
    }
}

impl From<Half> for half::f16 {
    fn from(x: Half) -> Self {
        half::f16::from_bits(x.to_bits())
    }
}

impl fmt::Debug for Half {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_f32(), f)
    }
}

/// One value is a block.
impl super::Codec for Half {
    const LEN: usize = 1;
    fn quantize_slice(src: &[f32], dst: &mut [u8], _: super::Rounding) {
        quantize(src, dst)
    }
    fn dequantize_slice(src: &[u8], dst: &mut [f32]) {
        dequantize(src, dst)
    }
    fn dot_slice(src: &[u8], x: &[f32]) -> f64 {
        dot(src, x)
    }
}

/// Converts `out.len()` little-endian f16 values from `bytes` (`2 * out.len()` bytes; the caller
/// checks the sizes, and a short `bytes` fills only the front of `out`).
pub fn dequantize(bytes: &[u8], out: &mut [f32]) {
    // Aligned little-endian data (the usual case: GGUF aligns tensor data) goes through half's
    // slice conversion, which uses the CPU's f16 instructions where it has them.
    if cfg!(target_endian = "little") {
        if let Ok(values) = bytemuck::try_cast_slice::<u8, half::f16>(bytes) {
            if values.len() == out.len() {
                values.convert_to_f32_slice(out);
                return;
            }
        }
    }
    for (out, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *out = Half([b[0], b[1]]).to_f32();
    }
}

/// Rounds each value of `src` to the nearest f16 (ties to even) into `dst` (`2 * src.len()`
/// bytes; the caller checks the sizes and that the values are within f16 range).
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (&x, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&Half::from_f32(x).0);
    }
}

/// `sum_i value_i * x_i` over the f16 values in `bytes` (`2 * x.len()` bytes; the caller checks
/// the sizes), accumulated in f64 in index order.
pub fn dot(bytes: &[u8], x: &[f32]) -> f64 {
    bytes
        .chunks_exact(2)
        .zip(x)
        .map(|(b, &x)| f64::from(Half([b[0], b[1]]).to_f32()) * f64::from(x))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::dequantize_all;
    use crate::BlockType;

    #[test]
    fn known_bit_patterns() {
        // (bits, value): 1.0, -2.0, 0.5, largest finite, smallest subnormal, -0, +inf.
        let table: [(u16, f32); 7] = [
            (0x3C00, 1.0),
            (0xC000, -2.0),
            (0x3800, 0.5),
            (0x7BFF, 65504.0),
            (0x0001, 5.960_464_5e-8),
            (0x8000, -0.0),
            (0x7C00, f32::INFINITY),
        ];
        let bytes: Vec<u8> = table.iter().flat_map(|(b, _)| b.to_le_bytes()).collect();
        let out = dequantize_all(BlockType::F16, &bytes);
        for ((bits, want), got) in table.iter().zip(&out) {
            assert_eq!(got.to_bits(), want.to_bits(), "f16 bits {bits:#06x}");
            assert_eq!(Half::from_bits(*bits).to_f32().to_bits(), want.to_bits());
        }
        assert!(Half::from_bits(0x7E00).to_f32().is_nan());
    }

    #[test]
    fn aligned_and_unaligned_inputs_agree() {
        // Every f16 bit pattern except NaNs, whose payload handling may differ between the CPU's
        // conversion instruction and the software one.
        let bits: Vec<u16> = (0..=u16::MAX)
            .filter(|b| b & 0x7C00 != 0x7C00 || b & 0x3FF == 0)
            .collect();
        let words: Vec<u16> = bits.iter().map(|b| b.to_le()).collect();
        let aligned: &[u8] = bytemuck::cast_slice(&words);
        let mut storage: Vec<u8> = vec![0];
        storage.extend_from_slice(aligned);
        let mut fast = vec![0.0; bits.len()];
        let mut slow = vec![0.0; bits.len()];
        dequantize(aligned, &mut fast);
        dequantize(&storage[1..], &mut slow);
        for ((b, f), s) in bits.iter().zip(&fast).zip(&slow) {
            assert_eq!(f.to_bits(), s.to_bits(), "f16 bits {b:#06x}");
            assert_eq!(f.to_bits(), half::f16::from_bits(*b).to_f32().to_bits());
        }
    }

    #[test]
    fn from_f32_rounds_to_nearest_even() {
        assert_eq!(Half::from_f32(1.0).to_bits(), 0x3C00);
        // 1 + 2^-11 is halfway between 1 and the next f16 (1 + 2^-10): ties go to even, 1.0.
        assert_eq!(Half::from_f32(1.0 + 2f32.powi(-11)).to_bits(), 0x3C00);
        assert_eq!(Half::from_f32(1.0 + 3.0 * 2f32.powi(-11)).to_bits(), 0x3C02);
        assert_eq!(format!("{:?}", Half::from_f32(-1.5)), "-1.5");
    }
}
