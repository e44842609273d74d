//! What the cache keeps of K and V: each (position, KV head) row rounded as the kernels store
//! it (`shaders/glsl/include/kv_cache.glsl`), and the words it is stored as. The CPU
//! reference rounds its cache through this, so it attends over the values the device reads
//! back and the two stay as close for f16 and q8 as for f32.

use half::f16;

use super::KvType;
use hearth_quant::Q8_BLOCK;

/// Rounds `row` (a multiple of `kv_type.group()` values) in place to what a cache of
/// `kv_type` reads back: f16 to nearest even; q8 per block of 32 to a step of max|x| / 127,
/// ties to even, as `kv_round` in the shader computes it.
pub fn round_row(kv_type: KvType, row: &mut [f32]) {
    match kv_type {
        KvType::F32 => {}
        KvType::F16 => {
            for x in row {
                *x = f16::from_f32(*x).to_f32();
            }
        }
        KvType::Q8 => {
            for block in row.chunks_mut(Q8_BLOCK) {
                let d = block.iter().fold(0.0f32, |m, x| m.max(x.abs())) / 127.0;
                for x in block {
                    // Through an integer, as the kernel's is: a rounded -0 reads back as +0.
                    let q = if d == 0.0 {
                        0
                    } else {
                        (*x / d).round_ties_even().clamp(-127.0, 127.0) as i32
                    };
                    *x = q as f32 * d;
                }
            }
        }
    }
}

/// The 32-bit words a cache of `kv_type` stores `row` (a multiple of `kv_type.group()`
/// values) as, in the layout of `kv_cache.glsl`; `row` is rounded as [`round_row`] does.
pub fn encode_row(kv_type: KvType, row: &[f32]) -> Vec<u32> {
    match kv_type {
        KvType::F32 => row.iter().map(|x| x.to_bits()).collect(),
        KvType::F16 => row
            .chunks(2)
            .map(|p| {
                let lo = f16::from_f32(p[0]).to_bits() as u32;
                let hi = f16::from_f32(p.get(1).copied().unwrap_or(0.0)).to_bits() as u32;
                lo | hi << 16
            })
            .collect(),
        KvType::Q8 => {
            let mut words = Vec::with_capacity(row.len() / Q8_BLOCK * 9);
            for block in row.chunks(Q8_BLOCK) {
                let d = block.iter().fold(0.0f32, |m, x| m.max(x.abs())) / 127.0;
                for four in block.chunks(4) {
                    let mut w = 0u32;
                    for (b, &x) in four.iter().enumerate() {
                        let q = match d == 0.0 {
                            true => 0,
                            false => (x / d).round_ties_even().clamp(-127.0, 127.0) as i8,
                        };
                        w |= (q as u8 as u32) << (8 * b);
                    }
                    words.push(w);
                }
                words.push(d.to_bits());
            }
            words
        }
    }
}

/// The values `words` (as [`encode_row`] lays them out) hold.
pub fn decode_row(kv_type: KvType, words: &[u32]) -> Vec<f32> {
    match kv_type {
        KvType::F32 => words.iter().map(|&w| f32::from_bits(w)).collect(),
        KvType::F16 => words
            .iter()
            .flat_map(|&w| [w as u16, (w >> 16) as u16])
            .map(|h| f16::from_bits(h).to_f32())
            .collect(),
        KvType::Q8 => words
            .chunks(9)
            .flat_map(|block| {
                let d = f32::from_bits(block[8]);
                block[..8]
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .map(move |b| b as i8 as f32 * d)
                    .collect::<Vec<_>>()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_holds_the_rounded_values_in_the_stated_bytes() {
        let row: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 30.0) / 7.0)
            .collect();
        for t in KvType::ALL {
            let words = encode_row(t, &row);
            assert_eq!(words.len() * 4, t.bytes(row.len()), "{t}");
            let mut rounded = row.clone();
            round_row(t, &mut rounded);
            assert_eq!(decode_row(t, &words), rounded, "{t}");
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // 1 + 2^-11 lies halfway between 1 and the next half; ties go to the even one, 1.
        let mut row = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 0.1, -2.5];
        round_row(KvType::F16, &mut row);
        assert_eq!(row[0], 1.0);
        assert_eq!(row[1], 1.0 + 2f32.powi(-9));
        assert_eq!(row[2], f16::from_f32(0.1).to_f32());
        assert_eq!(row[3], -2.5);
    }

    #[test]
    fn q8_steps_by_the_block_maximum() {
        let mut row: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
        row[40] = 0.0;
        let original = row.clone();
        round_row(KvType::Q8, &mut row);
        // Block 0's maximum |x| is 20: a step of 20/127, the extremes exact.
        let d0 = 20.0f32 / 127.0;
        assert_eq!(row[0], -127.0 * d0);
        for (x, o) in row[..32].iter().zip(&original[..32]) {
            assert!((x - o).abs() <= d0 / 2.0 + 1e-6, "{x} vs {o}");
            assert_eq!(((x / d0).round() * d0), *x);
        }
        // Block 1 (12 ..= 43): step 43/127.
        let d1 = 43.0f32 / 127.0;
        assert_eq!(row[63], 127.0 * d1);
        assert_eq!(row[40], 0.0);
        // An all-zero block stays zero (no division by a zero step).
        let mut zeros = [0.0f32; 32];
        round_row(KvType::Q8, &mut zeros);
        assert!(zeros.iter().all(|&x| x == 0.0));
    }
}
