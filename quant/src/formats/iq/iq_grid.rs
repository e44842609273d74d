//! The i-quants' grids and sign table, expanded at compile time from the packed rows in
//! [`super::iq_grids`]. Every i-quant below 4 bits stores a value group as an index into one of
//! these grids (magnitudes only) plus sign bits.

use super::iq_grids::*;

/// IQ2_XXS's 256 rows of 8 magnitudes.
pub static IQ2XXS: [[i8; 8]; 256] = expand(&IQ2XXS_PACKED, &IQ2XXS_LEVELS, 2);
/// IQ2_XS's 512 rows of 8.
pub static IQ2XS: [[i8; 8]; 512] = expand(&IQ2XS_PACKED, &IQ2XS_LEVELS, 2);
/// IQ2_S's 1024 rows of 8.
pub static IQ2S: [[i8; 8]; 1024] = expand(&IQ2S_PACKED, &IQ2S_LEVELS, 2);
/// IQ3_XXS's 256 rows of 4.
pub static IQ3XXS: [[i8; 4]; 256] = expand(&IQ3XXS_PACKED, &IQ3XXS_LEVELS, 3);
/// IQ3_S's 512 rows of 4.
pub static IQ3S: [[i8; 4]; 512] = expand(&IQ3S_PACKED, &IQ3S_LEVELS, 3);
/// IQ1_S's and IQ1_M's 2048 rows of 8 values in {-1, 0, 1}.
pub static IQ1S: [[i8; 8]; 2048] = expand(&IQ1S_PACKED, &IQ1S_LEVELS, 2);

/// ggml's `ksigns_iq2xs`: 7 stored sign bits widened to 8, the eighth making the count of
/// negative values even (the quantizer only produces such groups, so the bit is not stored).
pub static SIGNS7: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        table[i] = i as u8 | (((i as u8).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    table
};

/// Unpacks each row's `bits`-bit level indices, first value lowest. An index past `levels`
/// fails the build.
const fn expand<const N: usize, const W: usize, const L: usize>(
    packed: &[u16; N],
    levels: &[i8; L],
    bits: u32,
) -> [[i8; W]; N] {
    let mask = (1u16 << bits) - 1;
    let mut out = [[0i8; W]; N];
    let mut i = 0;
    while i < N {
        let mut j = 0;
        while j < W {
            out[i][j] = levels[((packed[i] >> (bits * j as u32)) & mask) as usize];
            j += 1;
        }
        i += 1;
    }
    out
}

/// `out[j] = grid[j]`, negated where bit j of `signs` is set: a grid row's signed levels.
pub(crate) fn signed_levels(grid: &[i8], signs: u8, out: &mut [i8]) {
    for (j, (out, &g)) in out.iter_mut().zip(grid).enumerate() {
        *out = if signs >> j & 1 == 1 { -g } else { g };
    }
}

/// `out[j] = scales[j / 16] * levels[j]`: the values of a super-block given as levels and a
/// scale per 16. ggml multiplies the scale by the grid magnitude and then applies the sign;
/// the product with the signed level is the same f32, since negation is exact.
pub(crate) fn scaled(levels: &[i8; 256], scales: &[f32; 16], out: &mut [f32; 256]) {
    for ((out, levels), &d) in out
        .chunks_exact_mut(16)
        .zip(levels.chunks_exact(16))
        .zip(scales)
    {
        for (out, &l) in out.iter_mut().zip(levels) {
            *out = d * f32::from(l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_match_ggml_at_known_places() {
        // From ggml-common.h: iq2xxs_grid[1] = 0x080808080808082b (first value in the low
        // byte), iq3xxs_grid[1] = 0x04040414, iq1s_grid[0] = 0xffffffffffffffff.
        assert_eq!(IQ2XXS[1], [43, 8, 8, 8, 8, 8, 8, 8]);
        assert_eq!(IQ3XXS[1], [20, 4, 4, 4]);
        assert_eq!(IQ1S[0], [-1; 8]);
        assert_eq!(&SIGNS7[..8], &[0, 129, 130, 3, 132, 5, 6, 135]);
    }
}
