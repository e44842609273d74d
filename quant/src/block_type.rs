//! The tensor types this crate can dequantize: identity, GGUF id and block geometry.

use std::fmt;

use crate::{formats, Format};

/// A tensor element type this crate can dequantize. Names follow ggml.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum BlockType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    IQ1_M,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

impl BlockType {
    /// Every type, in GGUF id order.
    pub const ALL: [BlockType; 25] = {
        use BlockType::*;
        [
            F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS,
            IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, BF16, TQ1_0, TQ2_0, MXFP4,
        ]
    };

    /// The type with this GGUF id (`ggml_type`), or `None` for ids this crate cannot dequantize.
    pub fn from_ggml_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|ty| ty.ggml_id() == Some(id))
    }

    /// The id GGUF files use for this type. `None` is kept for Hearth-only formats, which GGUF
    /// has no id for.
    pub const fn ggml_id(self) -> Option<u32> {
        use BlockType::*;
        Some(match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            IQ2_XXS => 16,
            IQ2_XS => 17,
            IQ3_XXS => 18,
            IQ1_S => 19,
            IQ4_NL => 20,
            IQ3_S => 21,
            IQ2_S => 22,
            IQ4_XS => 23,
            IQ1_M => 29,
            BF16 => 30,
            TQ1_0 => 34,
            TQ2_0 => 35,
            MXFP4 => 39,
        })
    }

    /// ggml's name for the type (`Q4_1`, `F16`, ...).
    pub const fn name(self) -> &'static str {
        use BlockType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            IQ1_M => "IQ1_M",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
        }
    }

    /// Values in one block (1 for the plain float types).
    pub const fn block_size(self) -> usize {
        use BlockType::*;
        match self {
            F32 | F16 | BF16 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL | MXFP4 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S
            | IQ1_S | IQ1_M | IQ4_XS | TQ1_0 | TQ2_0 => formats::kquant::QK_K,
        }
    }

    /// Bytes one block takes: the size of the block struct that describes its layout.
    pub const fn block_bytes(self) -> usize {
        use BlockType::*;
        match self {
            F32 => size_of::<f32>(),
            F16 => size_of::<formats::f16::Half>(),
            BF16 => size_of::<u16>(),
            Q4_0 => size_of::<formats::q4_0::BlockQ4_0>(),
            Q4_1 => size_of::<formats::q4::BlockQ4>(),
            Q5_0 => size_of::<formats::q5_0::BlockQ5_0>(),
            Q5_1 => size_of::<formats::q5_1::BlockQ5_1>(),
            Q8_0 => size_of::<formats::q8::BlockQ8>(),
            Q2_K => size_of::<formats::q2_k::BlockQ2_K>(),
            Q3_K => size_of::<formats::q3_k::BlockQ3_K>(),
            Q4_K => size_of::<formats::q4_k::BlockQ4_K>(),
            Q5_K => size_of::<formats::q5_k::BlockQ5_K>(),
            Q6_K => size_of::<formats::q6_k::BlockQ6_K>(),
            IQ2_XXS => size_of::<formats::iq::iq2::BlockIq2Xxs>(),
            IQ2_XS => size_of::<formats::iq::iq2::BlockIq2Xs>(),
            IQ2_S => size_of::<formats::iq::iq2::BlockIq2S>(),
            IQ3_XXS => size_of::<formats::iq::iq3::BlockIq3Xxs>(),
            IQ3_S => size_of::<formats::iq::iq3::BlockIq3S>(),
            IQ1_S => size_of::<formats::iq::iq1::BlockIq1S>(),
            IQ1_M => size_of::<formats::iq::iq1::BlockIq1M>(),
            IQ4_NL => size_of::<formats::iq4_nl::BlockIq4Nl>(),
            IQ4_XS => size_of::<formats::iq4_xs::BlockIq4Xs>(),
            TQ1_0 => size_of::<formats::ternary::BlockTq1_0>(),
            TQ2_0 => size_of::<formats::ternary::BlockTq2_0>(),
            MXFP4 => size_of::<formats::mxfp4::BlockMxfp4>(),
        }
    }

    /// The Hearth format with this type's bytes, for the GGUF types that are one (F32, F16,
    /// Q4_1 = Q4, Q8_0 = Q8, Q4_0, Q5_0, Q5_1, the k-quants): tensors of these types are used as
    /// they are.
    pub fn format(self) -> Option<Format> {
        self.ggml_id().and_then(Format::from_gguf_id)
    }

    /// Bytes that `values` values take, or `None` when `values` is not a whole number of blocks
    /// or the size overflows `usize`.
    pub const fn bytes_for(self, values: usize) -> Option<usize> {
        if values % self.block_size() != 0 {
            return None;
        }
        (values / self.block_size()).checked_mul(self.block_bytes())
    }
}

impl fmt::Display for BlockType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
