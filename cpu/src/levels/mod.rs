//! Weight blocks as integer levels: what the integer dot products read. Every quantized format
//! Hearth computes with is affine per group of values, `value = level * d + m`, with the
//! level an integer that fits an `i8`; a format's unpacker writes a block's levels and, for
//! each 16 values, the `d` and `m` they share (formats whose groups are 32 or 64 values wide
//! repeat them). The dot product of a row with quantized activations is then
//! `sum(d * d_x * sum(level * q)) + sum(m * sum(x))`, integer inside each group.
//!
//! `d` and `m` are the f32 values the format's own dequantization multiplies and adds, so
//! `level as f32 * d + m` is its dequantized value bit for bit (tested for every format).
//! One module per format, named as in `hearth_quant::formats`, but for the formats whose blocks
//! give their own levels (the lattice i-quants and the ternary types), which share one
//! ([`own_levels`]).

use hearth_quant::Format;

mod iq4_nl;
mod iq4_xs;
mod mxfp4;
mod own_levels;
mod q2;
mod q2_k;
mod q3;
mod q3_k;
mod q3h;
mod q4;
mod q4_0;
mod q4_k;
mod q4b64;
mod q5;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6;
mod q6_k;
mod q8;
#[cfg(test)]
mod tests;

/// Values that share one `d` and `m` entry.
pub const GROUP: usize = 16;

/// Values of `format` that share one `d` and one `m` (the unpacked rows repeat them per
/// 16): 16 for the k-quants and i-quants whose sub-blocks are 16 wide, 32 for the rest (whose groups are
/// 32 or 64 wide). A product may apply each scale once per this many values.
pub const fn group_width(format: Format) -> usize {
    match format {
        Format::Q2_K
        | Format::Q3_K
        | Format::Q6_K
        | Format::IQ2_XS
        | Format::IQ2_S
        | Format::IQ1_M => 16,
        _ => 32,
    }
}

/// Whether `format` has a base `m` per group: false for the symmetric formats, whose `m` is
/// zero, so that products may skip the `m * sum(x)` term.
pub const fn has_base(format: Format) -> bool {
    !format.is_lattice()
        && !matches!(
            format,
            Format::Q8
                | Format::Q4_0
                | Format::Q5_0
                | Format::Q3_K
                | Format::Q6_K
                | Format::IQ4_NL
                | Format::IQ4_XS
                | Format::MXFP4
                | Format::TQ1_0
                | Format::TQ2_0
        )
}

/// Whether `format`'s levels reach beyond +-64: Q8's 8-bit levels and the table of the 4-bit
/// i-quants (-127..=113). Products that add pairs of byte products in 16 bits cannot take them.
pub const fn beyond_64(format: Format) -> bool {
    matches!(format, Format::Q8 | Format::IQ4_NL | Format::IQ4_XS)
}

/// One block's levels and per-16 `d` and `m`: slices of the block's length and of a
/// sixteenth of it.
pub struct BlockOut<'a> {
    pub levels: &'a mut [i8],
    pub d: &'a mut [f32],
    pub m: &'a mut [f32],
}

/// Unpacks one block of a format (its bytes, exactly one block) into `out`.
pub type Unpack = fn(block: &[u8], out: BlockOut);

/// The unpacker of `format`; `None` for the float formats (F32, F16), which are not levels.
pub fn unpacker(format: Format) -> Option<Unpack> {
    Some(match format {
        Format::F32 | Format::F16 => return None,
        Format::Q2 => q2::unpack,
        Format::Q3 => q3::unpack,
        Format::Q3H => q3h::unpack,
        Format::Q4 => q4::unpack,
        Format::Q4B64 => q4b64::unpack,
        Format::Q5 => q5::unpack,
        Format::Q6 => q6::unpack,
        Format::Q8 => q8::unpack,
        Format::Q4_0 => q4_0::unpack,
        Format::Q5_0 => q5_0::unpack,
        Format::Q5_1 => q5_1::unpack,
        Format::Q2_K => q2_k::unpack,
        Format::Q3_K => q3_k::unpack,
        Format::Q4_K => q4_k::unpack,
        Format::Q5_K => q5_k::unpack,
        Format::Q6_K => q6_k::unpack,
        Format::IQ4_NL => iq4_nl::unpack,
        Format::IQ4_XS => iq4_xs::unpack,
        Format::MXFP4 => mxfp4::unpack,
        Format::IQ2_XXS => own_levels::iq2_xxs,
        Format::IQ2_XS => own_levels::iq2_xs,
        Format::IQ2_S => own_levels::iq2_s,
        Format::IQ3_XXS => own_levels::iq3_xxs,
        Format::IQ3_S => own_levels::iq3_s,
        Format::IQ1_S => own_levels::iq1_s,
        Format::IQ1_M => own_levels::iq1_m,
        Format::TQ1_0 => own_levels::tq1_0,
        Format::TQ2_0 => own_levels::tq2_0,
    })
}

/// The levels of 32 values whose 4-bit codes are packed as GGUF's 32-value types pack them
/// (value `j < 16` in the low nibble of `qs[j]`, value `j + 16` in the high), each code mapped
/// to its level by `level`.
fn nibble_levels(qs: &[u8], levels: &mut [i8], level: impl Fn(u8) -> i8) {
    let (lo, hi) = levels.split_at_mut(16);
    for ((&q, lo), hi) in qs.iter().zip(lo).zip(hi) {
        *lo = level(q & 0x0F);
        *hi = level(q >> 4);
    }
}

/// A weight row unpacked: levels [cols], and `d`, `m` [cols / 16].
#[derive(Clone, Debug, Default)]
pub struct RowLevels {
    pub levels: Vec<i8>,
    pub d: Vec<f32>,
    pub m: Vec<f32>,
}

impl RowLevels {
    /// Unpacks `row` (whole blocks of `format`, `cols` values) with `unpack`, reusing this
    /// row's memory.
    pub fn unpack(&mut self, format: Format, unpack: Unpack, row: &[u8], cols: usize) {
        self.levels.resize(cols, 0);
        self.d.resize(cols / GROUP, 0.0);
        self.m.resize(cols / GROUP, 0.0);
        let (len, bytes) = (format.block_size(), format.block_bytes());
        let groups = len / GROUP;
        let blocks = row
            .chunks_exact(bytes)
            .zip(self.levels.chunks_exact_mut(len));
        let scales = self
            .d
            .chunks_exact_mut(groups)
            .zip(self.m.chunks_exact_mut(groups));
        for ((block, levels), (d, m)) in blocks.zip(scales) {
            unpack(block, BlockOut { levels, d, m });
        }
    }
}
