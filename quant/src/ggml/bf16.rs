//! BF16: bfloat16 values (GGUF type 30), the top 16 bits of an f32.

/// Converts `out.len()` little-endian bf16 values from `bytes` (`2 * out.len()` bytes; the
/// caller checks the sizes, and a short `bytes` fills only the front of `out`). Exact, NaN
/// payloads included, as ggml's `GGML_BF16_TO_FP32`.
pub fn dequantize(bytes: &[u8], out: &mut [f32]) {
    for (out, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *out = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
    }
}

#[cfg(test)]
mod tests {
    use crate::testutil::dequantize_all;
    use crate::BlockType;

    #[test]
    fn values_are_the_top_half_of_an_f32() {
        // (bf16 bits, value)
        let table: [(u16, f32); 5] = [
            (0x3F80, 1.0),
            (0xC020, -2.5),
            (0x0000, 0.0),
            (0x7F80, f32::INFINITY),
            (0x3E20, 0.15625),
        ];
        let bytes: Vec<u8> = table.iter().flat_map(|(b, _)| b.to_le_bytes()).collect();
        let out = dequantize_all(BlockType::BF16, &bytes);
        for ((bits, want), got) in table.iter().zip(&out) {
            assert_eq!(got.to_bits(), want.to_bits(), "bf16 bits {bits:#06x}");
        }
        // A signalling NaN keeps its payload.
        let out = dequantize_all(BlockType::BF16, &0x7F81u16.to_le_bytes());
        assert_eq!(out[0].to_bits(), 0x7F81_0000);
    }
}
