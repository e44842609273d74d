//! The tensor element types GGUF files use (ggml's `ggml_type`): id, name and block geometry.
//!
//! Only the geometry lives here (how many values a block holds and how many bytes it takes),
//! which is what the reader needs to size and bounds-check tensor data. Dequantization belongs
//! to the `quant` crate.
//!
//! Besides ggml's types, GGUF files written by Hearth may hold Hearth's own block formats
//! (Q2, Q3, Q3H, Q4B64, Q5, Q6) under private ids from [`PRIVATE_ID_BASE`] up. Their names and
//! geometry come from [`hearth_quant::Format`], which defines them once; the reader accepts
//! them only in files that state the version of those layouts (see `gguf::reader`).

use std::fmt;

use hearth_quant::{Format, PRIVATE_ID_BASE};

/// One ggml tensor type. The discriminant is the id stored in GGUF files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    // 4 and 5 were Q4_2 and Q4_3, removed from ggml long ago.
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    // 31..=33 were the Q4_0_4_4 family of repacked layouts, since removed.
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    // Hearth's own formats. The ids must equal `Format::gguf_id` (a test checks).
    Q2 = 1024,
    Q3 = 1025,
    Q3H = 1026,
    Q4B64 = 1027,
    Q5 = 1028,
    Q6 = 1029,
}

/// Values per super-block of the k-quants and i-quants.
const QK_K: u64 = 256;

/// Every known type, in id order.
pub const ALL_TYPES: [GgmlType; 38] = {
    use GgmlType::*;
    [
        F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ2_XXS,
        IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64, IQ1_M, BF16,
        TQ1_0, TQ2_0, MXFP4, Q2, Q3, Q3H, Q4B64, Q5, Q6,
    ]
};

impl GgmlType {
    /// The type with this GGUF id, or `None` for ids this build does not know.
    pub fn from_id(id: u32) -> Option<Self> {
        ALL_TYPES.iter().copied().find(|t| t.id() == id)
    }

    /// The id stored in GGUF tensor index entries.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The type's name: ggml's for ggml's types (`Q4_1`, `F16`, ...), Hearth's for Hearth's
    /// private formats (`Q3H`, `Q4B64`, ...).
    pub fn name(self) -> &'static str {
        self.geometry().0
    }

    /// Number of values in one block (1 for plain scalar types).
    pub fn block_size(self) -> u64 {
        self.geometry().1
    }

    /// Bytes one block takes.
    pub fn block_bytes(self) -> u64 {
        self.geometry().2
    }

    /// True for the block-quantized types (everything but plain floats and integers).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for Hearth's own formats, stored under ids ggml does not use. A file holding them
    /// must carry [`hearth_quant::VERSION_KEY`].
    pub fn is_private(self) -> bool {
        self.id() >= PRIVATE_ID_BASE
    }

    /// The Hearth format with this type's bytes: F32, F16, Q4 (= Q4_1), Q8 (= Q8_0) and the
    /// private formats; `None` for the ggml types Hearth only reads.
    pub fn hearth_format(self) -> Option<Format> {
        use GgmlType::*;
        Some(match self {
            F32 => Format::F32,
            F16 => Format::F16,
            Q4_1 => Format::Q4,
            Q8_0 => Format::Q8,
            Q2 => Format::Q2,
            Q3 => Format::Q3,
            Q3H => Format::Q3H,
            Q4B64 => Format::Q4B64,
            Q5 => Format::Q5,
            Q6 => Format::Q6,
            _ => return None,
        })
    }

    /// Bits one value takes on average (block bytes * 8 / block values).
    pub fn bits_per_weight(self) -> f64 {
        self.block_bytes() as f64 * 8.0 / self.block_size() as f64
    }

    /// Bytes taken by `n` values, or `None` when `n` is not a whole number of blocks or the
    /// size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        if n % self.block_size() != 0 {
            return None;
        }
        (n / self.block_size()).checked_mul(self.block_bytes())
    }

    /// (name, values per block, bytes per block), from ggml's `type_traits` table.
    fn geometry(self) -> (&'static str, u64, u64) {
        use GgmlType::*;
        match self {
            F32 => ("F32", 1, 4),
            F16 => ("F16", 1, 2),
            BF16 => ("BF16", 1, 2),
            F64 => ("F64", 1, 8),
            I8 => ("I8", 1, 1),
            I16 => ("I16", 1, 2),
            I32 => ("I32", 1, 4),
            I64 => ("I64", 1, 8),
            // fp16 scale + 32 nibbles
            Q4_0 => ("Q4_0", 32, 18),
            // fp16 scale and min + 32 nibbles
            Q4_1 => ("Q4_1", 32, 20),
            // fp16 scale + 32 high bits + 32 nibbles
            Q5_0 => ("Q5_0", 32, 22),
            Q5_1 => ("Q5_1", 32, 24),
            // fp16 scale + 32 int8
            Q8_0 => ("Q8_0", 32, 34),
            Q8_1 => ("Q8_1", 32, 36),
            Q2_K => ("Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 4),
            Q3_K => ("Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2),
            Q4_K => ("Q4_K", QK_K, 4 + 12 + QK_K / 2),
            Q5_K => ("Q5_K", QK_K, 4 + 12 + QK_K / 8 + QK_K / 2),
            Q6_K => ("Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2),
            Q8_K => ("Q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2),
            IQ2_XXS => ("IQ2_XXS", QK_K, 2 + QK_K / 4),
            IQ2_XS => ("IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
            IQ2_S => ("IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 32),
            IQ3_XXS => ("IQ3_XXS", QK_K, 2 + 3 * QK_K / 8),
            IQ3_S => (
                "IQ3_S",
                QK_K,
                2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64,
            ),
            IQ1_S => ("IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
            IQ1_M => ("IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
            IQ4_NL => ("IQ4_NL", 32, 18),
            IQ4_XS => ("IQ4_XS", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2),
            TQ1_0 => ("TQ1_0", QK_K, 2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5),
            TQ2_0 => ("TQ2_0", QK_K, 2 + QK_K / 4),
            MXFP4 => ("MXFP4", 32, 17),
            Q2 => hearth(Format::Q2),
            Q3 => hearth(Format::Q3),
            Q3H => hearth(Format::Q3H),
            Q4B64 => hearth(Format::Q4B64),
            Q5 => hearth(Format::Q5),
            Q6 => hearth(Format::Q6),
        }
    }
}

/// A Hearth format's name and geometry, as `hearth_quant` defines them.
fn hearth(f: Format) -> (&'static str, u64, u64) {
    (f.name(), f.block_size() as u64, f.block_bytes() as u64)
}

impl From<Format> for GgmlType {
    /// The GGUF tensor type a Hearth format is stored as.
    fn from(f: Format) -> Self {
        match f {
            Format::F32 => GgmlType::F32,
            Format::F16 => GgmlType::F16,
            Format::Q4 => GgmlType::Q4_1,
            Format::Q8 => GgmlType::Q8_0,
            Format::Q2 => GgmlType::Q2,
            Format::Q3 => GgmlType::Q3,
            Format::Q3H => GgmlType::Q3H,
            Format::Q4B64 => GgmlType::Q4B64,
            Format::Q5 => GgmlType::Q5,
            Format::Q6 => GgmlType::Q6,
        }
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ids_are_none() {
        for t in ALL_TYPES {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
        }
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 40, 1023, 1030, u32::MAX] {
            assert_eq!(GgmlType::from_id(id), None, "id {id}");
        }
    }

    #[test]
    fn block_sizes_match_ggml() {
        // Bytes per block from ggml's type_traits, written out independently of the formulas.
        let expected = [
            (GgmlType::F32, 1, 4),
            (GgmlType::F16, 1, 2),
            (GgmlType::BF16, 1, 2),
            (GgmlType::Q4_0, 32, 18),
            (GgmlType::Q4_1, 32, 20),
            (GgmlType::Q5_0, 32, 22),
            (GgmlType::Q5_1, 32, 24),
            (GgmlType::Q8_0, 32, 34),
            (GgmlType::Q2_K, 256, 84),
            (GgmlType::Q3_K, 256, 110),
            (GgmlType::Q4_K, 256, 144),
            (GgmlType::Q5_K, 256, 176),
            (GgmlType::Q6_K, 256, 210),
            (GgmlType::Q8_K, 256, 292),
            (GgmlType::IQ2_XXS, 256, 66),
            (GgmlType::IQ2_XS, 256, 74),
            (GgmlType::IQ2_S, 256, 82),
            (GgmlType::IQ3_XXS, 256, 98),
            (GgmlType::IQ3_S, 256, 110),
            (GgmlType::IQ1_S, 256, 50),
            (GgmlType::IQ1_M, 256, 56),
            (GgmlType::IQ4_XS, 256, 136),
            (GgmlType::TQ1_0, 256, 54),
            (GgmlType::TQ2_0, 256, 66),
            // Hearth's formats, from ARCHITECTURE.md's table.
            (GgmlType::Q2, 32, 12),
            (GgmlType::Q3, 32, 16),
            (GgmlType::Q3H, 64, 32),
            (GgmlType::Q4B64, 64, 36),
            (GgmlType::Q5, 64, 44),
            (GgmlType::Q6, 64, 52),
        ];
        for (t, block, bytes) in expected {
            assert_eq!((t.block_size(), t.block_bytes()), (block, bytes), "{t}");
        }
    }

    #[test]
    fn hearth_formats_map_to_their_gguf_ids_and_back() {
        for f in Format::ALL {
            let t = GgmlType::from(f);
            assert_eq!(t.id(), f.gguf_id(), "{f}");
            assert_eq!(t.hearth_format(), Some(f), "{f}");
            assert_eq!(t.is_private(), f.is_private(), "{f}");
            assert_eq!(
                (t.block_size(), t.block_bytes()),
                (f.block_size() as u64, f.block_bytes() as u64),
                "{f}"
            );
            assert_eq!(t.bits_per_weight(), f.bits_per_weight(), "{f}");
        }
        // Only Hearth's formats carry private ids, and each one has a Format.
        for t in ALL_TYPES {
            assert_eq!(t.is_private(), t.id() >= PRIVATE_ID_BASE, "{t}");
            if t.is_private() {
                assert!(t.hearth_format().is_some(), "{t}");
            }
        }
        assert_eq!(GgmlType::Q3H.name(), "Q3H");
        assert_eq!(GgmlType::Q4_1.name(), "Q4_1");
        assert_eq!(GgmlType::Q4_0.hearth_format(), None);
    }

    #[test]
    fn bytes_for_rejects_partial_blocks() {
        assert_eq!(GgmlType::Q4_1.bytes_for(576 * 1536), Some(552_960));
        assert_eq!(GgmlType::Q4_1.bytes_for(33), None);
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
    }
}
