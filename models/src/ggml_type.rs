//! The tensor element types GGUF files use (ggml's `ggml_type`): id, name and block geometry.
//!
//! Only the geometry lives here (how many values a block holds and how many bytes it takes),
//! which is what the reader needs to size and bounds-check tensor data. Dequantization belongs
//! to the `quant` crate.
//!
//! Besides ggml's types, GGUF files written by Hearth may hold Hearth's own block formats
//! (Q2, Q3, Q3H, Q4B64, Q5, Q6) under private ids from [`PRIVATE_ID_BASE`] up. They are
//! [`GgmlType::Hearth`], and their ids, names and geometry come from [`hearth_quant::Format`],
//! which declares them once; the reader accepts them only in files that state the version of
//! those layouts (see `gguf::reader`).

use std::fmt;

use hearth_quant::{Format, PRIVATE_ID_BASE};

/// One tensor type: one of ggml's, or one of Hearth's private formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    /// A Hearth format GGUF does not define, stored under its private id. Formats that are
    /// ggml types (F32, F16, Q4 = Q4_1, Q8 = Q8_0, Q4_0, Q5_0, Q5_1) are those types: build from a format with
    /// [`GgmlType::from`], which picks the right one.
    Hearth(Format),
}

/// Values per super-block of the k-quants and i-quants.
const QK_K: u64 = 256;

/// ggml's own types, in id order.
pub const GGML_TYPES: [GgmlType; 32] = {
    use GgmlType::*;
    [
        F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ2_XXS,
        IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64, IQ1_M, BF16,
        TQ1_0, TQ2_0, MXFP4,
    ]
};

impl GgmlType {
    /// Every known type: ggml's in id order, then Hearth's private formats.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        let private = Format::ALL.into_iter().filter(|f| f.is_private());
        GGML_TYPES.into_iter().chain(private.map(GgmlType::Hearth))
    }

    /// The type with this GGUF id, or `None` for ids this build does not know.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::all().find(|t| t.id() == id)
    }

    /// The id stored in GGUF tensor index entries.
    pub fn id(self) -> u32 {
        self.traits().0
    }

    /// The type's name: ggml's for ggml's types (`Q4_1`, `F16`, ...), Hearth's for Hearth's
    /// private formats (`Q3H`, `Q4B64`, ...).
    pub fn name(self) -> &'static str {
        self.traits().1
    }

    /// Number of values in one block (1 for plain scalar types).
    pub fn block_size(self) -> u64 {
        self.traits().2
    }

    /// Bytes one block takes.
    pub fn block_bytes(self) -> u64 {
        self.traits().3
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

    /// The Hearth format with this type's bytes: F32, F16, Q4 (= Q4_1), Q8 (= Q8_0), Q4_0,
    /// Q5_0, Q5_1 and the private formats; `None` for the ggml types Hearth only reads.
    pub fn hearth_format(self) -> Option<Format> {
        Format::from_gguf_id(self.id())
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

    /// (id, name, values per block, bytes per block): ggml's types from ggml's `ggml_type`
    /// enum and `type_traits` table, Hearth's formats from [`Format`]. Ids 4 and 5 were Q4_2 and Q4_3 and 31..=33 the Q4_0_4_4
    /// family of repacked layouts, all since removed from ggml.
    fn traits(self) -> (u32, &'static str, u64, u64) {
        use GgmlType::*;
        match self {
            F32 => (0, "F32", 1, 4),
            F16 => (1, "F16", 1, 2),
            // fp16 scale + 32 nibbles
            Q4_0 => (2, "Q4_0", 32, 18),
            // fp16 scale and min + 32 nibbles
            Q4_1 => (3, "Q4_1", 32, 20),
            // fp16 scale + 32 high bits + 32 nibbles
            Q5_0 => (6, "Q5_0", 32, 22),
            Q5_1 => (7, "Q5_1", 32, 24),
            // fp16 scale + 32 int8
            Q8_0 => (8, "Q8_0", 32, 34),
            Q8_1 => (9, "Q8_1", 32, 36),
            Q2_K => (10, "Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 4),
            Q3_K => (11, "Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2),
            Q4_K => (12, "Q4_K", QK_K, 4 + 12 + QK_K / 2),
            Q5_K => (13, "Q5_K", QK_K, 4 + 12 + QK_K / 8 + QK_K / 2),
            Q6_K => (14, "Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2),
            Q8_K => (15, "Q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2),
            IQ2_XXS => (16, "IQ2_XXS", QK_K, 2 + QK_K / 4),
            IQ2_XS => (17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32),
            IQ3_XXS => (18, "IQ3_XXS", QK_K, 2 + 3 * QK_K / 8),
            IQ1_S => (19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16),
            IQ4_NL => (20, "IQ4_NL", 32, 18),
            IQ3_S => (
                21,
                "IQ3_S",
                QK_K,
                2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64,
            ),
            IQ2_S => (22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 32 + QK_K / 32),
            IQ4_XS => (23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2),
            I8 => (24, "I8", 1, 1),
            I16 => (25, "I16", 1, 2),
            I32 => (26, "I32", 1, 4),
            I64 => (27, "I64", 1, 8),
            F64 => (28, "F64", 1, 8),
            IQ1_M => (29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
            BF16 => (30, "BF16", 1, 2),
            TQ1_0 => (
                34,
                "TQ1_0",
                QK_K,
                2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5,
            ),
            TQ2_0 => (35, "TQ2_0", QK_K, 2 + QK_K / 4),
            MXFP4 => (39, "MXFP4", 32, 17),
            Hearth(f) => (
                f.gguf_id(),
                f.name(),
                f.block_size() as u64,
                f.block_bytes() as u64,
            ),
        }
    }
}

impl From<Format> for GgmlType {
    /// The GGUF tensor type a Hearth format is stored as: the ggml type with its id (F32, F16,
    /// Q4_1, Q8_0, Q4_0, Q5_0, Q5_1), else [`GgmlType::Hearth`].
    fn from(f: Format) -> Self {
        let id = f.gguf_id();
        GGML_TYPES
            .into_iter()
            .find(|t| t.id() == id)
            .unwrap_or(GgmlType::Hearth(f))
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
        for t in GgmlType::all() {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
        }
        let mut ids: Vec<u32> = GgmlType::all().map(GgmlType::id).collect();
        let known = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), known, "ids are unique");
        let private = Format::ALL.iter().filter(|f| f.is_private()).count() as u32;
        let past_private = PRIVATE_ID_BASE + private;
        for id in [
            4,
            5,
            31,
            32,
            33,
            36,
            37,
            38,
            40,
            1023,
            past_private,
            u32::MAX,
        ] {
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
            // Hearth's formats, as docs/quantization.md lists them.
            (GgmlType::Hearth(Format::Q2), 32, 12),
            (GgmlType::Hearth(Format::Q3), 32, 16),
            (GgmlType::Hearth(Format::Q3H), 64, 32),
            (GgmlType::Hearth(Format::Q4B64), 64, 36),
            (GgmlType::Hearth(Format::Q5), 64, 44),
            (GgmlType::Hearth(Format::Q6), 64, 52),
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
        for t in GgmlType::all() {
            assert_eq!(t.is_private(), t.id() >= PRIVATE_ID_BASE, "{t}");
            if t.is_private() {
                assert!(t.hearth_format().is_some(), "{t}");
            }
        }
        assert_eq!(GgmlType::from(Format::Q3H).name(), "Q3H");
        assert_eq!(GgmlType::from(Format::Q4), GgmlType::Q4_1);
        assert_eq!(GgmlType::Q4_1.name(), "Q4_1");
        assert_eq!(GgmlType::from(Format::Q5_0), GgmlType::Q5_0);
        assert_eq!(GgmlType::Q4_0.hearth_format(), Some(Format::Q4_0));
        assert_eq!(GgmlType::Q4_K.hearth_format(), Some(Format::Q4_K));
        assert_eq!(GgmlType::Q8_K.hearth_format(), None);
    }

    #[test]
    fn bytes_for_rejects_partial_blocks() {
        assert_eq!(GgmlType::Q4_1.bytes_for(576 * 1536), Some(552_960));
        assert_eq!(GgmlType::Q4_1.bytes_for(33), None);
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
    }
}
