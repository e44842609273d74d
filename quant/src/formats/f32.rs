//! F32: plain little-endian IEEE single-precision values (GGUF type 0). Quantizing and
//! dequantizing are copies.

/// One value is a block.
impl super::Codec for f32 {
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

/// Copies `out.len()` little-endian f32 values from `bytes` (`4 * out.len()` bytes; the caller
/// checks the sizes, and a short `bytes` fills only the front of `out`).
pub fn dequantize(bytes: &[u8], out: &mut [f32]) {
    // Copy the bytes, then fix the byte order where the host is not little-endian.
    let dst: &mut [u8] = bytemuck::cast_slice_mut(out);
    let n = dst.len().min(bytes.len());
    dst[..n].copy_from_slice(&bytes[..n]);
    if cfg!(target_endian = "big") {
        for v in out.iter_mut() {
            *v = f32::from_bits(u32::from_le(v.to_bits()));
        }
    }
}

/// Copies `src` into `dst` as little-endian bytes (`4 * src.len()`; the caller checks the
/// sizes).
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    for (&x, out) in src.iter().zip(dst.chunks_exact_mut(4)) {
        out.copy_from_slice(&x.to_le_bytes());
    }
}

/// `sum_i value_i * x_i` over the little-endian f32 values in `bytes` (`4 * x.len()` bytes; the
/// caller checks the sizes), accumulated in f64 in index order.
pub fn dot(bytes: &[u8], x: &[f32]) -> f64 {
    bytes
        .chunks_exact(4)
        .zip(x)
        .map(|(b, &x)| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])) * f64::from(x))
        .sum()
}

#[cfg(test)]
mod tests {
    use crate::testutil::dequantize_all;
    use crate::BlockType;

    #[test]
    fn values_are_copied_bit_for_bit() {
        let values = [
            0.0f32,
            -0.0,
            1.0,
            -2.5,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::INFINITY,
            1e-42,
        ];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = dequantize_all(BlockType::F32, &bytes);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&values));
    }

    #[test]
    fn bytes_are_little_endian() {
        // 1.0f32 is 0x3F80_0000.
        assert_eq!(
            dequantize_all(BlockType::F32, &[0x00, 0x00, 0x80, 0x3F]),
            [1.0]
        );
    }
}
