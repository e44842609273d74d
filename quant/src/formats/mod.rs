//! Hearth's block formats: the layouts weights are stored in on the device.
//!
//! Each module owns one format: its block struct (`#[repr(C)]`, size checked at compile time),
//! how levels are packed into it, its dequantization, its quantization and a reference dot
//! product with an f32 vector. Dequantization is mirrored line for line by
//! `shaders/glsl/include/quant/<module>.glsl`. [`Format`] names the formats and checks sizes
//! before handing whole blocks to the modules.
//!
//! The formats are declared once, in the `formats!` table below: a row gives the name, the
//! module (which is also the GLSL include's name), the block type and the GGUF type id, and
//! the [`Format`] enum, its geometry and its dispatch are generated from it. The rest of Hearth
//! reads [`Format::ALL`]: `hearth-models` maps GGUF type ids with it, and `hearth-shaders`
//! compiles every kernel that reads weights once per format into a typed table. Adding a
//! format is its module here, its GLSL include and one row.
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
//! | Q4_0 | 32 | 18 | 4.5 | -8..=7 | 2 |
//! | Q5_0 | 32 | 22 | 5.5 | -16..=15 | 6 |
//! | Q5_1 | 32 | 24 | 6.0 | 0..=31 | 7 |
//! | Q2_K | 256 | 84 | 2.625 | 0..=3 | 10 (GGUF's) |
//! | Q3_K | 256 | 110 | 3.4375 | -4..=3 | 11 (GGUF's) |
//! | Q4_K | 256 | 144 | 4.5 | 0..=15 | 12 (GGUF's) |
//! | Q5_K | 256 | 176 | 5.5 | 0..=31 | 13 (GGUF's) |
//! | Q6_K | 256 | 210 | 6.5625 | -32..=31 | 14 (GGUF's) |
//! | IQ4_NL | 32 | 18 | 4.5 | 16 fixed levels, -127..=113 | 20 (GGUF's) |
//! | IQ4_XS | 256 | 136 | 4.25 | IQ4_NL's, a 6-bit scale per 32 | 23 (GGUF's) |
//! | MXFP4 | 32 | 17 | 4.25 | e2m1 doubled, -12..=12, a power-of-two scale | 39 (GGUF's) |
//! | IQ2_XXS | 256 | 66 | 2.0625 | lattice rows of 8, -43..=43, a scale per 32 | 16 (GGUF's) |
//! | IQ2_XS | 256 | 74 | 2.3125 | lattice rows of 8, -43..=43, a scale per 16 | 17 (GGUF's) |
//! | IQ2_S | 256 | 82 | 2.5625 | lattice rows of 8, -43..=43, a scale per 16 | 22 (GGUF's) |
//! | IQ3_XXS | 256 | 98 | 3.0625 | grid rows of 4, -62..=62, a scale per 32 | 18 (GGUF's) |
//! | IQ3_S | 256 | 110 | 3.4375 | grid rows of 4, -15..=15, a scale per 32 | 21 (GGUF's) |
//! | IQ1_S | 256 | 50 | 1.5625 | rows of 8 over 8 * {-1, 0, 1} ± 1, a scale per 32 | 19 (GGUF's) |
//! | IQ1_M | 256 | 56 | 1.75 | as IQ1_S, a scale per 16 | 29 (GGUF's) |
//! | TQ1_0 | 256 | 54 | 1.6875 | -1..=1 in base 3, one scale | 34 (GGUF's) |
//! | TQ2_0 | 256 | 66 | 2.0625 | -1..=1 in 2 bits, one scale | 35 (GGUF's) |
//!
//! Most quantized formats are asymmetric: `value = q * d + m` with the scale `d` and the
//! base `m` stored as f16 at the start of the block, computed in f32 as a multiply then an add
//! (never a fused multiply-add, so CPU and GPU agree bit for bit). Q8, Q4_0 and Q5_0 are
//! symmetric, `value = q * d` with a signed level (Q4_0 and Q5_0 store it offset by 8 and 16).
//! Multi-byte fields are little-endian.
//!
//! Q4, Q8, Q4_0, Q5_0 and Q5_1 have the same bytes as GGUF's Q4_1, Q8_0, Q4_0, Q5_0 and Q5_1,
//! and the k-quants (Q2_K to Q6_K) are GGUF's own, so those tensors load as they are and GGUF
//! files record them under GGUF's ids. Q4_0, Q5_0 and Q5_1 quantize as ggml's reference
//! quantizer does, byte for byte, whatever the [`Rounding`]. The k-quants are a 256-value
//! super-block of 16- or 32-value sub-blocks, each with its own scale (and, for Q2_K, Q4_K and
//! Q5_K, min) stored in 4 to 8 bits relative to the super-block's f16 scales; dequantization
//! follows ggml's operation order (see each module), and quantization ggml's reference
//! quantizers, which choose scales their own way whatever the [`Rounding`] (see [`kquant`]).
//! The i-quants and MXFP4 are GGUF's too: IQ4_NL and IQ4_XS index a table of 16 non-linear
//! levels, and the lattice i-quants (IQ1_S to IQ3_S, [`Format::is_lattice`]) store each 4 or 8
//! values as the index of a row of a fixed grid plus signs; the kernels compute with the
//! grid's signed integer levels and a scale per 16 or 32 values. All of them quantize as
//! ggml's quantizers do, byte for byte, with and without an importance matrix. So do the
//! ternary TQ1_0 and TQ2_0 (levels -1, 0, 1 and one scale per 256 values), which take none.
//!
//! The other formats do not exist in GGUF: files record
//! them under private type ids from [`PRIVATE_ID_BASE`] (1024) up, far above any id GGUF
//! assigns, together with the metadata key [`VERSION_KEY`] (`hearth.quant.version`) holding
//! [`FORMAT_VERSION`], the version of these private layouts. A reader that finds another
//! version must not interpret the private tensors.
//!
//! Every block struct is built from bytes only (f16 fields included, see [`f16::Half`]), so it
//! has alignment 1 and a `&[u8]` of any alignment can be viewed as a block slice in place.

use std::{fmt, str::FromStr};

use bytemuck::Pod;

use crate::{Error, Result};

mod fit;
pub mod iq;
pub mod kquant;
pub mod ternary;
#[cfg(test)]
mod tests;

/// Declares the formats from the table below: their modules, the [`Format`] enum, names,
/// GGUF type ids, geometry and the dispatch to each module's [`Codec`]. Everything else that
/// lists formats (GGUF types, shader variants, kernel tables) derives from [`Format::ALL`].
macro_rules! formats {
    ($($name:ident: $module:ident, $block:ty, $gguf_id:expr;)*) => {
        $(pub mod $module;)*

        /// A Hearth tensor format.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)] // GGUF's names for its types: Q4_0, ...
        pub enum Format {
            $($name,)*
        }

        impl Format {
            /// Every format, in table order.
            pub const ALL: [Format; [$(Format::$name),*].len()] = [$(Format::$name),*];

            /// The format's name (`"Q4B64"`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Format::$name => stringify!($name),)*
                }
            }

            /// The format's module in [`formats`](crate::formats), which is also the name of
            /// its GLSL twin `shaders/glsl/include/quant/<module>.glsl` (`"q4b64"`, ...).
            pub const fn module(self) -> &'static str {
                match self {
                    $(Format::$name => stringify!($module),)*
                }
            }

            /// Values in one block (1 for F32 and F16).
            pub const fn block_size(self) -> usize {
                match self {
                    $(Format::$name => <$block as Codec>::LEN,)*
                }
            }

            /// Bytes one block takes: the size of its block struct.
            pub const fn block_bytes(self) -> usize {
                match self {
                    $(Format::$name => size_of::<$block>(),)*
                }
            }

            /// The GGUF tensor type id files record the format under: GGUF's own for the
            /// formats that are GGUF types (F32, F16, Q4 = Q4_1, Q8 = Q8_0, Q4_0, Q5_0, Q5_1
            /// and the k-quants), a private one from [`PRIVATE_ID_BASE`] for the rest.
            pub const fn gguf_id(self) -> u32 {
                match self {
                    $(Format::$name => $gguf_id,)*
                }
            }

            /// Quantizes `src` into `dst`; sizes and values are checked.
            fn encode(self, src: &[f32], dst: &mut [u8], rounding: Rounding) {
                match self {
                    $(Format::$name => <$block as Codec>::quantize_slice(src, dst, rounding),)*
                }
            }

            /// Dequantizes `src` into `dst`; sizes are checked.
            fn decode(self, src: &[u8], dst: &mut [f32]) {
                match self {
                    $(Format::$name => <$block as Codec>::dequantize_slice(src, dst),)*
                }
            }

            /// The reference dot product in f64; sizes are checked.
            fn dot_f64(self, src: &[u8], x: &[f32]) -> f64 {
                match self {
                    $(Format::$name => <$block as Codec>::dot_slice(src, x),)*
                }
            }
        }
    };
}

// The format table. A row: the format's name, its module (and GLSL include), its block type
// and the GGUF tensor type id files record it under. Adding a format is a module, its GLSL
// include and one row; the formats' order here is the order of `Format::ALL`.
formats! {
    // name   module  block type          GGUF type id
    F32:      f32,    f32,                0;
    F16:      f16,    f16::Half,          1;
    Q2:       q2,     q2::BlockQ2,        PRIVATE_ID_BASE;
    Q3:       q3,     q3::BlockQ3,        PRIVATE_ID_BASE + 1;
    Q3H:      q3h,    q3h::BlockQ3H,      PRIVATE_ID_BASE + 2;
    Q4:       q4,     q4::BlockQ4,        3; // GGUF's Q4_1
    Q4B64:    q4b64,  q4b64::BlockQ4B64,  PRIVATE_ID_BASE + 3;
    Q5:       q5,     q5::BlockQ5,        PRIVATE_ID_BASE + 4;
    Q6:       q6,     q6::BlockQ6,        PRIVATE_ID_BASE + 5;
    Q8:       q8,     q8::BlockQ8,        8; // GGUF's Q8_0
    Q4_0:     q4_0,   q4_0::BlockQ4_0,    2;
    Q5_0:     q5_0,   q5_0::BlockQ5_0,    6;
    Q5_1:     q5_1,   q5_1::BlockQ5_1,    7;
    Q2_K:     q2_k,   q2_k::BlockQ2_K,    10;
    Q3_K:     q3_k,   q3_k::BlockQ3_K,    11;
    Q4_K:     q4_k,   q4_k::BlockQ4_K,    12;
    Q5_K:     q5_k,   q5_k::BlockQ5_K,    13;
    Q6_K:     q6_k,   q6_k::BlockQ6_K,    14;
    IQ4_NL:   iq4_nl, iq4_nl::BlockIq4Nl, 20;
    IQ4_XS:   iq4_xs, iq4_xs::BlockIq4Xs, 23;
    MXFP4:    mxfp4,  mxfp4::BlockMxfp4,  39;
    IQ2_XXS:  iq2_xxs, iq2_xxs::BlockIq2Xxs, 16;
    IQ2_XS:   iq2_xs, iq2_xs::BlockIq2Xs, 17;
    IQ2_S:    iq2_s,  iq2_s::BlockIq2S,   22;
    IQ3_XXS:  iq3_xxs, iq3_xxs::BlockIq3Xxs, 18;
    IQ3_S:    iq3_s,  iq3_s::BlockIq3S,   21;
    IQ1_S:    iq1_s,  iq1_s::BlockIq1S,   19;
    IQ1_M:    iq1_m,  iq1_m::BlockIq1M,   29;
    TQ1_0:    tq1_0,  tq1_0::BlockTq1_0,  34;
    TQ2_0:    tq2_0,  tq2_0::BlockTq2_0,  35;
}

/// What the table needs from a format's block type: values per block, and quantization,
/// dequantization and the reference dot product over whole slices of blocks, whose sizes the
/// caller has checked. Block structs get it from [`block_codec!`].
pub(crate) trait Codec {
    /// Values per block.
    const LEN: usize;
    fn quantize_slice(src: &[f32], dst: &mut [u8], rounding: Rounding);
    fn dequantize_slice(src: &[u8], dst: &mut [f32]);
    fn dot_slice(src: &[u8], x: &[f32]) -> f64;
}

/// Implements [`Codec`] for a block struct of `$len` values from its per-block `quantize`,
/// `dequantize` and `dot`.
macro_rules! block_codec {
    ($block:ty, $len:expr) => {
        impl $crate::formats::Codec for $block {
            const LEN: usize = $len;
            fn quantize_slice(src: &[f32], dst: &mut [u8], rounding: $crate::Rounding) {
                $crate::formats::quantize_blocks(src, dst, rounding, Self::quantize)
            }
            fn dequantize_slice(src: &[u8], dst: &mut [f32]) {
                $crate::for_each_block(src, dst, Self::dequantize)
            }
            fn dot_slice(src: &[u8], x: &[f32]) -> f64 {
                $crate::formats::dot_blocks(src, x, Self::dot)
            }
        }
    };
}
pub(crate) use block_codec;

/// Version of the private block layouts (Q2, Q3, Q3H, Q4B64, Q5, Q6). Files record it under
/// [`VERSION_KEY`]; a change to any of those layouts bumps it.
pub const FORMAT_VERSION: u32 = 1;

/// The first GGUF tensor type id of the formats GGUF does not define; Hearth's private formats
/// take ids from it up, one each.
pub const PRIVATE_ID_BASE: u32 = 1024;

/// GGUF metadata key (u32) recording [`FORMAT_VERSION`] in files with private tensor types.
pub const VERSION_KEY: &str = "hearth.quant.version";

/// Magnitude from which f32 values round to an infinite f16 (the largest finite f16 is 65504;
/// values below 65520 round down to it).
const F16_OVERFLOW: f32 = 65520.0;

/// How [`Format::quantize_with`] chooses each block's scale and base. F32 and F16 ignore it,
/// and so do Q4_0, Q5_0, Q5_1 and the k-quants, which always follow ggml's reference
/// quantizers so their bytes are the ones llama.cpp writes; Q8 (GGUF's Q8_0) follows ggml's
/// with `MinMax` (see `BlockQ8::quantize`).
///
/// Otherwise the levels are computed with the scale and base as stored (rounded to f16), so
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
    /// The format with this name, ignoring ASCII case.
    pub fn from_name(s: &str) -> Option<Format> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
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

    /// The format recorded under GGUF tensor type id `id`, if any.
    pub fn from_gguf_id(id: u32) -> Option<Format> {
        Self::ALL.into_iter().find(|f| f.gguf_id() == id)
    }

    /// The format rows of `row` values are stored in when `self` is wanted: `self` when its
    /// blocks fit the rows; else, of the formats whose blocks fit, the one with the fewest bits
    /// per weight at or above `self`'s, so the fallback loses no precision; else the one with
    /// the most bits below. F32's blocks fit every row, so there always is one. Loading a model
    /// and quantizing a file both choose by this rule.
    pub fn fitting(self, row: usize) -> Format {
        let fits = |f: &Format| row % f.block_size() == 0;
        if fits(&self) {
            return self;
        }
        let wanted = self.bits_per_weight();
        let by_bits = |a: &Format, b: &Format| a.bits_per_weight().total_cmp(&b.bits_per_weight());
        let candidates = Self::ALL.into_iter().filter(fits);
        let above = candidates
            .clone()
            .filter(|f| f.bits_per_weight() >= wanted)
            .min_by(by_bits);
        above
            .or_else(|| candidates.min_by(|a, b| by_bits(b, a)))
            .unwrap_or(Format::F32)
    }

    /// Whether the format is one of ggml's k-quants (Q2_K to Q6_K): 256-value super-blocks
    /// whose sub-blocks carry their own scales, quantized by ggml's reference algorithms
    /// whatever the [`Rounding`].
    pub const fn is_k_quant(self) -> bool {
        matches!(
            self,
            Format::Q2_K | Format::Q3_K | Format::Q4_K | Format::Q5_K | Format::Q6_K
        )
    }

    /// Whether the format's blocks are 256-value super-blocks: the k-quants, IQ4_XS, the
    /// lattice i-quants (sub-blocks of 32 or 16 values with scales of their own) and the
    /// ternary TQ1_0 and TQ2_0 (one scale). Kernels see each 32 of a super-block as a block of
    /// its own.
    pub const fn is_super_block(self) -> bool {
        self.is_k_quant()
            || self.is_lattice()
            || matches!(self, Format::IQ4_XS | Format::TQ1_0 | Format::TQ2_0)
    }

    /// Whether the format is one of ggml's i-quants below 4 bits (IQ1_S to IQ3_S): groups of 4
    /// or 8 values stored as the index of a row of a fixed grid, plus signs.
    pub const fn is_lattice(self) -> bool {
        matches!(
            self,
            Format::IQ2_XXS
                | Format::IQ2_XS
                | Format::IQ2_S
                | Format::IQ3_XXS
                | Format::IQ3_S
                | Format::IQ1_S
                | Format::IQ1_M
        )
    }

    /// Whether llama.cpp refuses to quantize to the format without an importance matrix
    /// (ggml's `ggml_quantize_requires_imatrix`): IQ2_XXS, IQ2_XS and IQ1_S.
    pub const fn requires_importance(self) -> bool {
        matches!(self, Format::IQ2_XXS | Format::IQ2_XS | Format::IQ1_S)
    }

    /// Whether [`Format::quantize_weighted`] uses the importance matrix: the k-quants,
    /// ggml's 32-value formats with a weighted quantizer (Q4_0, Q5_0, Q5_1, Q4 as GGUF's
    /// Q4_1), the 4-bit i-quants (IQ4_NL, IQ4_XS), the lattice i-quants, and Hearth's own
    /// scale-and-base formats (Q2, Q3, Q3H, Q4B64, Q5, Q6).
    pub const fn uses_importance(self) -> bool {
        self.is_k_quant()
            || self.is_lattice()
            || matches!(
                self,
                Format::Q4_0
                    | Format::Q5_0
                    | Format::Q5_1
                    | Format::Q4
                    | Format::IQ4_NL
                    | Format::IQ4_XS
                    | Format::Q2
                    | Format::Q3
                    | Format::Q3H
                    | Format::Q4B64
                    | Format::Q5
                    | Format::Q6
            )
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
        self.encode(src, dst, rounding);
        Ok(())
    }

    /// Quantizes rows of `importance.len()` values with an importance weight per column (an
    /// importance matrix: how much each input column counts in the layer's outputs). The
    /// k-quants, Q4_0, Q5_0, Q5_1 and Q4 (GGUF's Q4_1) weigh each value's error by it as
    /// ggml's `quantize_q*` functions do when given llama.cpp's imatrix, and so do the
    /// i-quants; Hearth's own formats (Q2, Q3, Q3H, Q4B64, Q5, Q6) weigh it as ggml's 32-value
    /// formats do (importance times `sqrt(mean x^2 + x^2)` over the row) in a finer search;
    /// F16, F32 and Q8 quantize as [`Format::quantize`] does, without it.
    ///
    /// Errors as [`Format::quantize_with`], and [`Error::Importance`] when the rows are not
    /// whole blocks, do not divide `src`, or a weight is negative or not finite.
    pub fn quantize_weighted(self, src: &[f32], dst: &mut [u8], importance: &[f32]) -> Result<()> {
        self.check_sizes(dst.len(), src.len())?;
        self.check_input(src)?;
        let row = importance.len();
        let bad = |reason: String| {
            Err(Error::Importance {
                format: self,
                reason,
            })
        };
        if row == 0 || row % self.block_size() != 0 || src.len() % row != 0 {
            return bad(format!(
                "{row} weights are not rows of whole {}-value blocks dividing {} values",
                self.block_size(),
                src.len()
            ));
        }
        if let Some(i) = importance
            .iter()
            .position(|w| !(w.is_finite() && *w >= 0.0))
        {
            return bad(format!("weight {i} is {}", importance[i]));
        }
        let row_bytes = row / self.block_size() * self.block_bytes();
        for (src, dst) in src.chunks_exact(row).zip(dst.chunks_exact_mut(row_bytes)) {
            match self {
                Format::Q4_K => {
                    weighted_blocks(src, dst, importance, q4_k::BlockQ4_K::quantize_weighted)
                }
                Format::Q5_K => {
                    weighted_blocks(src, dst, importance, q5_k::BlockQ5_K::quantize_weighted)
                }
                Format::Q6_K => {
                    weighted_blocks(src, dst, importance, q6_k::BlockQ6_K::quantize_weighted)
                }
                Format::Q2_K => {
                    weighted_blocks(src, dst, importance, q2_k::BlockQ2_K::quantize_weighted)
                }
                Format::Q3_K => {
                    weighted_blocks(src, dst, importance, q3_k::BlockQ3_K::quantize_weighted)
                }
                Format::Q4_0 => row_weighted_blocks(
                    src,
                    dst,
                    importance,
                    q4_0::BlockQ4_0::quantize_with_weights,
                ),
                Format::Q5_0 => row_weighted_blocks(
                    src,
                    dst,
                    importance,
                    q5_0::BlockQ5_0::quantize_with_weights,
                ),
                Format::Q4 => {
                    row_weighted_blocks(src, dst, importance, q4::BlockQ4::quantize_with_weights)
                }
                Format::Q5_1 => row_weighted_blocks(
                    src,
                    dst,
                    importance,
                    q5_1::BlockQ5_1::quantize_with_weights,
                ),
                Format::IQ4_NL => {
                    weighted_blocks(src, dst, importance, iq4_nl::BlockIq4Nl::quantize_weighted)
                }
                Format::IQ4_XS => {
                    weighted_blocks(src, dst, importance, iq4_xs::BlockIq4Xs::quantize_weighted)
                }
                Format::IQ2_XXS => weighted_blocks(
                    src,
                    dst,
                    importance,
                    iq2_xxs::BlockIq2Xxs::quantize_weighted,
                ),
                Format::IQ2_XS => {
                    weighted_blocks(src, dst, importance, iq2_xs::BlockIq2Xs::quantize_weighted)
                }
                Format::IQ2_S => {
                    weighted_blocks(src, dst, importance, iq2_s::BlockIq2S::quantize_weighted)
                }
                Format::IQ3_XXS => weighted_blocks(
                    src,
                    dst,
                    importance,
                    iq3_xxs::BlockIq3Xxs::quantize_weighted,
                ),
                Format::IQ3_S => {
                    weighted_blocks(src, dst, importance, iq3_s::BlockIq3S::quantize_weighted)
                }
                Format::IQ1_S => {
                    weighted_blocks(src, dst, importance, iq1_s::BlockIq1S::quantize_weighted)
                }
                Format::IQ1_M => {
                    weighted_blocks(src, dst, importance, iq1_m::BlockIq1M::quantize_weighted)
                }
                Format::Q2 => {
                    row_weighted_blocks(src, dst, importance, q2::BlockQ2::quantize_weighted)
                }
                Format::Q3 => {
                    row_weighted_blocks(src, dst, importance, q3::BlockQ3::quantize_weighted)
                }
                Format::Q3H => {
                    row_weighted_blocks(src, dst, importance, q3h::BlockQ3H::quantize_weighted)
                }
                Format::Q4B64 => {
                    row_weighted_blocks(src, dst, importance, q4b64::BlockQ4B64::quantize_weighted)
                }
                Format::Q5 => {
                    row_weighted_blocks(src, dst, importance, q5::BlockQ5::quantize_weighted)
                }
                Format::Q6 => {
                    row_weighted_blocks(src, dst, importance, q6::BlockQ6::quantize_weighted)
                }
                _ => self.encode(src, dst, Rounding::Search),
            }
        }
        Ok(())
    }

    /// Dequantizes `dst.len()` values from `src`, exactly as the block structs' `dequantize`
    /// (for the GGUF types the ggml-compatible code that also serves [`crate::dequantize`]).
    ///
    /// Sizes are checked as for [`Format::quantize_with`]; `src` may have any alignment.
    pub fn dequantize(self, src: &[u8], dst: &mut [f32]) -> Result<()> {
        self.check_sizes(src.len(), dst.len())?;
        self.decode(src, dst);
        Ok(())
    }

    /// Reference dot product `sum_i w_i * x_i` of the `x.len()` values stored in `src` with
    /// `x`. The products of the dequantized values (exact in f64) are summed in f64, in index
    /// order within each block and block by block, and the sum is rounded to f32 once.
    ///
    /// Sizes are checked as for [`Format::dequantize`], with `x.len()` the value count.
    pub fn dot(self, src: &[u8], x: &[f32]) -> Result<f32> {
        self.check_sizes(src.len(), x.len())?;
        Ok(self.dot_f64(src, x) as f32)
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
pub(crate) fn quantize_blocks<B: Pod, const N: usize>(
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

/// Quantizes each `N`-value chunk of a row `src` into a block of `dst` with the matching chunk
/// of `importance`. The caller has checked the sizes.
fn weighted_blocks<B: Pod, const N: usize>(
    src: &[f32],
    dst: &mut [u8],
    importance: &[f32],
    quantize: fn(&[f32; N], &[f32; N]) -> B,
) {
    let blocks: &mut [B] = bytemuck::cast_slice_mut(dst);
    let chunks = src.chunks_exact(N).zip(importance.chunks_exact(N));
    for (block, (src, importance)) in blocks.iter_mut().zip(chunks) {
        if let (Ok(src), Ok(importance)) = (src.try_into(), importance.try_into()) {
            *block = quantize(src, importance);
        }
    }
}

/// ggml's 32-value formats with an importance matrix (`quantize_row_q4_0_impl` and its
/// siblings): each value of a row weighs its importance times `sqrt(mean x^2 + x^2)`, the mean
/// taken over the whole row, and each block is fitted with those weights.
fn row_weighted_blocks<B: Pod, const N: usize>(
    src: &[f32],
    dst: &mut [u8],
    importance: &[f32],
    quantize: fn(&[f32; N], &[f32; N]) -> B,
) {
    let sigma2 = kquant::sum_squares(src) / src.len() as f32;
    let weights: Vec<f32> = src
        .iter()
        .zip(importance)
        .map(|(&x, &q)| kquant::importance_weight(q, sigma2, x))
        .collect();
    weighted_blocks(src, dst, &weights, quantize);
}

/// Sums `dot` over the blocks of `src` and their `N`-value chunks of `x`, in f64. The caller has
/// checked the sizes.
pub(crate) fn dot_blocks<B: Pod, const N: usize>(
    src: &[u8],
    x: &[f32],
    dot: fn(&B, &[f32; N]) -> f64,
) -> f64 {
    let blocks: &[B] = bytemuck::cast_slice(src);
    let mut sum = 0.0;
    for (block, x) in blocks.iter().zip(x.chunks_exact(N)) {
        if let Ok(x) = <&[f32; N]>::try_from(x) {
            sum += dot(block, x);
        }
    }
    sum
}
