//! Hearth's block formats: the layouts weights are stored in on the device.
//!
//! Each module owns one format: its block struct (`#[repr(C)]`, size checked at compile time),
//! how levels are packed into it, its dequantization, its quantization and a reference dot
//! product with an f32 vector. Dequantization is mirrored line for line by
//! `shaders/glsl/include/quant/<name>.glsl`. [`Format`] names the formats and checks sizes
//! before handing whole blocks to the modules.
//!
//! | format | values/block | bytes/block | bits/weight | levels | GGUF type id |
//! |---|---|---|---|---|---|
//! | F32 | 1 | 4 | 32 | - | 0 |
//! | F16 | 1 | 2 | 16 | - | 1 |
//! | Q2 | 32 | 12 | 3.0 | 0..=3 | 1024 (private) |
//! | Q3 | 32 | 16 | 4.0 | 0..=7 | 1025 (private) |
//! | Q3H | 64 | 32 | 4.0 | 0..=10 | 1026 (private) |
//! | Q4 | 32 | 20 | 5.0 | 0..=15 | 3 (GGUF's Q4_1) |
//! | Q4B64 | 64 | 36 | 4.5 | 0..=15 | 1027 (private) |
//! | Q5 | 64 | 44 | 5.5 | 0..=31 | 1028 (private) |
//! | Q6 | 64 | 52 | 6.5 | 0..=63 | 1029 (private) |
//! | Q8 | 32 | 34 | 8.5 | -127..=127 | 8 (GGUF's Q8_0) |
//!
//! The quantized formats but Q8 are asymmetric: `value = q * d + m` with the scale `d` and the
//! base `m` stored as f16 at the start of the block, computed in f32 as a multiply then an add
//! (never a fused multiply-add, so CPU and GPU agree bit for bit). Q8 is symmetric,
//! `value = q * d`. Multi-byte fields are little-endian.
//!
//! Q4 and Q8 have the same bytes as GGUF's Q4_1 and Q8_0, so those tensors load as they are and
//! GGUF files record them under GGUF's ids. The other formats do not exist in GGUF: files record
//! them under private type ids from [`PRIVATE_ID_BASE`] (1024) up, far above any id GGUF
//! assigns, together with the metadata key [`VERSION_KEY`] (`hearth.quant.version`) holding
//! [`FORMAT_VERSION`], the version of these private layouts. A reader that finds another
//! version must not interpret the private tensors.
//!
//! Every block struct is built from bytes only (f16 fields included, see [`f16::Half`]), so it
//! has alignment 1 and a `&[u8]` of any alignment can be viewed as a block slice in place.

use std::{fmt, str::FromStr};

use bytemuck::Pod;

use crate::{for_each_block, Error, Result};

pub mod f16;
pub mod f32;
mod fit;
pub mod q2;
pub mod q3;
pub mod q3h;
pub mod q4;
pub mod q4b64;
pub mod q5;
pub mod q6;
pub mod q8;
#[cfg(test)]
mod tests;

/// Version of the private block layouts (Q2, Q3, Q3H, Q4B64, Q5, Q6). Files record it under
/// [`VERSION_KEY`]; a change to any of those layouts bumps it.
pub const FORMAT_VERSION: u32 = 1;

/// The first GGUF tensor type id of the formats GGUF does not define; Hearth's private formats
/// use `PRIVATE_ID_BASE..PRIVATE_ID_BASE + 6`.
pub const PRIVATE_ID_BASE: u32 = 1024;

/// GGUF metadata key (u32) recording [`FORMAT_VERSION`] in files with private tensor types.
pub const VERSION_KEY: &str = "hearth.quant.version";

/// Magnitude from which f32 values round to an infinite f16 (the largest finite f16 is 65504;
/// values below 65520 round down to it).
const F16_OVERFLOW: f32 = 65520.0;

/// A Hearth tensor format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    F32,
    F16,
    Q2,
    Q3,
    Q3H,
    Q4,
    Q4B64,
    Q5,
    Q6,
    Q8,
}

/// How [`Format::quantize_with`] chooses each block's scale and base. F32 and F16 ignore it.
///
/// Either way, the levels are computed with the scale and base as stored (rounded to f16), so
/// each value gets the stored level nearest to it, `q = round((w - m) / d)` clamped to the
/// level range (computed in f32 as `(w - m) * (1 / d)`, ties to even).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// Inferflow's rule: `m = min`, `d = (max - min) / (levels - 1)` (Q8: `d = absmax / 127`).
    /// A constant block gets `d = 0`, all levels 0 and `m` the value.
    MinMax,
    /// Per block, searches scales and bases for the least squared error of the stored block:
    /// grids of several widths and anchors, each refitted by least squares (Q8: the scale
    /// alone). Never worse than [`MinMax`](Rounding::MinMax), which is one of its candidates;
    /// an order of magnitude slower.
    #[default]
    Search,
}

impl Format {
    /// Every format, in declaration order.
    pub const ALL: [Format; 10] = {
        use Format::*;
        [F32, F16, Q2, Q3, Q3H, Q4, Q4B64, Q5, Q6, Q8]
    };

    /// The format's name (`"Q4B64"`, ...).
    pub const fn name(self) -> &'static str {
        use Format::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q2 => "Q2",
            Q3 => "Q3",
            Q3H => "Q3H",
            Q4 => "Q4",
            Q4B64 => "Q4B64",
            Q5 => "Q5",
            Q6 => "Q6",
            Q8 => "Q8",
        }
    }

    /// The format with this name, ignoring ASCII case.
    pub fn from_name(s: &str) -> Option<Format> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
    }

    /// Values in one block (1 for F32 and F16).
    pub const fn block_size(self) -> usize {
        use Format::*;
        match self {
            F32 | F16 => 1,
            Q2 => q2::BLOCK_LEN,
            Q3 => q3::BLOCK_LEN,
            Q3H => q3h::BLOCK_LEN,
            Q4 => q4::BLOCK_LEN,
            Q4B64 => q4b64::BLOCK_LEN,
            Q5 => q5::BLOCK_LEN,
            Q6 => q6::BLOCK_LEN,
            Q8 => q8::BLOCK_LEN,
        }
    }

    /// Bytes one block takes: the size of its block struct.
    pub const fn block_bytes(self) -> usize {
        use Format::*;
        match self {
            F32 => size_of::<f32>(),
            F16 => size_of::<f16::Half>(),
            Q2 => size_of::<q2::BlockQ2>(),
            Q3 => size_of::<q3::BlockQ3>(),
            Q3H => size_of::<q3h::BlockQ3H>(),
            Q4 => size_of::<q4::BlockQ4>(),
            Q4B64 => size_of::<q4b64::BlockQ4B64>(),
            Q5 => size_of::<q5::BlockQ5>(),
            Q6 => size_of::<q6::BlockQ6>(),
            Q8 => size_of::<q8::BlockQ8>(),
        }
    }

    /// Storage bits per value, scales included.
    pub fn bits_per_weight(self) -> f64 {
        (self.block_bytes() * 8) as f64 / self.block_size() as f64
    }

    /// Bytes that `values` values take, or `None` when `values` is not a whole number of blocks
    /// or the size overflows `usize`.
    pub const fn bytes_for(self, values: usize) -> Option<usize> {
        if values % self.block_size() != 0 {
            return None;
        }
        (values / self.block_size()).checked_mul(self.block_bytes())
    }

    /// The GGUF tensor type id files record the format under: GGUF's own for F32, F16, Q4
    /// (Q4_1) and Q8 (Q8_0), a private one from [`PRIVATE_ID_BASE`] for the rest.
    pub const fn gguf_id(self) -> u32 {
        use Format::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4 => 3,
            Q8 => 8,
            Q2 => PRIVATE_ID_BASE,
            Q3 => PRIVATE_ID_BASE + 1,
            Q3H => PRIVATE_ID_BASE + 2,
            Q4B64 => PRIVATE_ID_BASE + 3,
            Q5 => PRIVATE_ID_BASE + 4,
            Q6 => PRIVATE_ID_BASE + 5,
        }
    }

    /// The format recorded under GGUF tensor type id `id`, if any.
    pub fn from_gguf_id(id: u32) -> Option<Format> {
        Self::ALL.into_iter().find(|f| f.gguf_id() == id)
    }

    /// Whether GGUF does not define the format, so files record it under a private id and
    /// [`VERSION_KEY`].
    pub const fn is_private(self) -> bool {
        self.gguf_id() >= PRIVATE_ID_BASE
    }

    /// Quantizes `src` into `dst` with [`Rounding::Search`].
    pub fn quantize(self, src: &[f32], dst: &mut [u8]) -> Result<()> {
        self.quantize_with(src, dst, Rounding::Search)
    }

    /// Quantizes `src` into `dst`, choosing each block's scale and base by `rounding`.
    ///
    /// `src.len()` must be a whole number of blocks and `dst` exactly the bytes they take
    /// ([`Format::bytes_for`]); every value must be finite, and below 65520 in magnitude for
    /// all formats but F32 (their f16 fields would overflow). Errors name the sizes or the
    /// first bad value, and leave `dst` untouched. F16 rounds to nearest, F32 copies.
    pub fn quantize_with(self, src: &[f32], dst: &mut [u8], rounding: Rounding) -> Result<()> {
        self.check_sizes(dst.len(), src.len())?;
        self.check_input(src)?;
        use Format::*;
        match self {
            F32 => f32::quantize(src, dst),
            F16 => f16::quantize(src, dst),
            Q2 => quantize_blocks(src, dst, rounding, q2::BlockQ2::quantize),
            Q3 => quantize_blocks(src, dst, rounding, q3::BlockQ3::quantize),
            Q3H => quantize_blocks(src, dst, rounding, q3h::BlockQ3H::quantize),
            Q4 => quantize_blocks(src, dst, rounding, q4::BlockQ4::quantize),
            Q4B64 => quantize_blocks(src, dst, rounding, q4b64::BlockQ4B64::quantize),
            Q5 => quantize_blocks(src, dst, rounding, q5::BlockQ5::quantize),
            Q6 => quantize_blocks(src, dst, rounding, q6::BlockQ6::quantize),
            Q8 => quantize_blocks(src, dst, rounding, q8::BlockQ8::quantize),
        }
        Ok(())
    }

    /// Dequantizes `dst.len()` values from `src`, exactly as the block structs' `dequantize`
    /// (for Q4 and Q8 the ggml-compatible code that also serves [`crate::dequantize`]).
    ///
    /// Sizes are checked as for [`Format::quantize_with`]; `src` may have any alignment.
    pub fn dequantize(self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        self.check_sizes(src.len(), dst.len())?;
        use Format::*;
        match self {
            F32 => f32::dequantize(src, dst),
            F16 => f16::dequantize(src, dst),
            Q2 => for_each_block(src, dst, q2::BlockQ2::dequantize),
            Q3 => for_each_block(src, dst, q3::BlockQ3::dequantize),
            Q3H => for_each_block(src, dst, q3h::BlockQ3H::dequantize),
            Q4 => for_each_block(src, dst, q4::BlockQ4::dequantize),
            Q4B64 => for_each_block(src, dst, q4b64::BlockQ4B64::dequantize),
            Q5 => for_each_block(src, dst, q5::BlockQ5::dequantize),
            Q6 => for_each_block(src, dst, q6::BlockQ6::dequantize),
            Q8 => for_each_block(src, dst, q8::BlockQ8::dequantize),
        }
        Ok(())
    }

    /// Reference dot product `sum_i w_i * x_i` of the `x.len()` values stored in `src` with
    /// `x`. The products of the dequantized values (exact in f64) are summed in f64, in index
    /// order within each block and block by block, and the sum is rounded to f32 once.
    ///
    /// Sizes are checked as for [`Format::dequantize`], with `x.len()` the value count.
    pub fn dot(self, src: &[u8], x: &[f32]) -> Result<f32> {
        self.check_sizes(src.len(), x.len())?;
        use Format::*;
        let sum = match self {
            F32 => f32::dot(src, x),
            F16 => f16::dot(src, x),
            Q2 => dot_blocks(src, x, q2::BlockQ2::dot),
            Q3 => dot_blocks(src, x, q3::BlockQ3::dot),
            Q3H => dot_blocks(src, x, q3h::BlockQ3H::dot),
            Q4 => dot_blocks(src, x, q4::BlockQ4::dot),
            Q4B64 => dot_blocks(src, x, q4b64::BlockQ4B64::dot),
            Q5 => dot_blocks(src, x, q5::BlockQ5::dot),
            Q6 => dot_blocks(src, x, q6::BlockQ6::dot),
            Q8 => dot_blocks(src, x, q8::BlockQ8::dot),
        };
        Ok(sum as f32)
    }

    /// Checks that `values` values are whole blocks that take exactly `bytes` bytes.
    fn check_sizes(self, bytes: usize, values: usize) -> Result<()> {
        let Some(expected) = self.bytes_for(values) else {
            return Err(Error::FormatPartialBlock {
                format: self,
                values,
                block_size: self.block_size(),
            });
        };
        if bytes != expected {
            return Err(Error::FormatByteCount {
                format: self,
                values,
                expected,
                found: bytes,
            });
        }
        Ok(())
    }

    /// Checks that every value can be quantized: finite, and within f16 range unless F32.
    fn check_input(self, src: &[f32]) -> Result<()> {
        let limit = if self == Format::F32 {
            f32::INFINITY
        } else {
            F16_OVERFLOW
        };
        // Fast path: one pass that only compares (NaN fails `<`).
        if src.iter().all(|x| x.abs() < limit) {
            return Ok(());
        }
        for (index, &x) in src.iter().enumerate() {
            if x.is_nan() {
                let what = "NaN";
                return Err(Error::NonFinite {
                    format: self,
                    index,
                    what,
                });
            }
            if x.is_infinite() {
                let what = if x > 0.0 { "+inf" } else { "-inf" };
                return Err(Error::NonFinite {
                    format: self,
                    index,
                    what,
                });
            }
            if x.abs() >= limit {
                let value = x.to_string();
                return Err(Error::OutOfRange {
                    format: self,
                    index,
                    value,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl FromStr for Format {
    type Err = Error;

    /// As [`Format::from_name`]; an unknown name is [`Error::UnknownFormat`], whose message
    /// lists the valid names.
    fn from_str(s: &str) -> Result<Self> {
        Format::from_name(s).ok_or_else(|| Error::UnknownFormat { name: s.to_owned() })
    }
}

/// The valid format names, comma-separated (for error messages).
pub(crate) fn format_names() -> String {
    Format::ALL.map(Format::name).join(", ")
}

/// The values `q * d + m` of an asymmetric block whose value `j` has level `level(j)`: a
/// rounded multiply then an add in f32 (no fused multiply-add), `d` and `m` widened from f16.
/// The GLSL twins reproduce this bit for bit.
pub(crate) fn dequantize_levels<const N: usize>(
    d: f16::Half,
    m: f16::Half,
    level: impl Fn(usize) -> u8,
    out: &mut [f32; N],
) {
    let (d, m) = (d.to_f32(), m.to_f32());
    for (j, out) in out.iter_mut().enumerate() {
        *out = f32::from(level(j)) * d + m;
    }
}

/// A block's reference dot product with `x`: its values, from `dequantize`, times `x` (see
/// [`dot_values`]).
pub(crate) fn dot_block<const N: usize>(
    dequantize: impl FnOnce(&mut [f32; N]),
    x: &[f32; N],
) -> f64 {
    let mut w = [0.0; N];
    dequantize(&mut w);
    dot_values(&w, x)
}

/// `sum_i w_i * x_i` in f64, in index order: each product of two f32 values is exact in f64, so
/// only the additions round.
pub(crate) fn dot_values(w: &[f32], x: &[f32]) -> f64 {
    w.iter()
        .zip(x)
        .map(|(&w, &x)| f64::from(w) * f64::from(x))
        .sum()
}

/// Quantizes each `N`-value chunk of `src` into a block of `dst`. The caller has checked the
/// sizes; blocks are 1-aligned, so the view is always possible.
fn quantize_blocks<B: Pod, const N: usize>(
    src: &[f32],
    dst: &mut [u8],
    rounding: Rounding,
    quantize: fn(&[f32; N], Rounding) -> B,
) {
    let blocks: &mut [B] = bytemuck::cast_slice_mut(dst);
    for (block, src) in blocks.iter_mut().zip(src.chunks_exact(N)) {
        if let Ok(src) = <&[f32; N]>::try_from(src) {
            *block = quantize(src, rounding);
        }
    }
}

/// Sums `dot` over the blocks of `src` and their `N`-value chunks of `x`, in f64. The caller has
/// checked the sizes.
fn dot_blocks<B: Pod, const N: usize>(src: &[u8], x: &[f32], dot: fn(&B, &[f32; N]) -> f64) -> f64 {
    let blocks: &[B] = bytemuck::cast_slice(src);
    let mut sum = 0.0;
    for (block, x) in blocks.iter().zip(x.chunks_exact(N)) {
        if let Ok(x) = <&[f32; N]>::try_from(x) {
            sum += dot(block, x);
        }
    }
    sum
}
