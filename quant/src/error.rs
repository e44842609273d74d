//! The crate's error type.

use crate::{BlockType, Format};

/// Why a tensor could not be quantized, dequantized or dotted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A GGUF tensor type id (`ggml_type`) this crate cannot dequantize.
    #[error("unsupported ggml tensor type id {id}")]
    Unsupported { id: u32 },
    /// The value count is not a whole number of blocks.
    #[error("{ty}: {values} values are not a whole number of {block_size}-value blocks")]
    PartialBlock {
        ty: BlockType,
        values: usize,
        block_size: usize,
    },
    /// The byte count is not what the value count needs.
    #[error("{ty}: {values} values take {expected} bytes, found {found}")]
    ByteCount {
        ty: BlockType,
        values: usize,
        expected: usize,
        found: usize,
    },
    /// A Hearth format's value count is not a whole number of blocks.
    #[error("{format}: {values} values are not a whole number of {block_size}-value blocks")]
    FormatPartialBlock {
        format: Format,
        values: usize,
        block_size: usize,
    },
    /// A Hearth format's byte count is not what the value count needs.
    #[error("{format}: {values} values take {expected} bytes, found {found}")]
    FormatByteCount {
        format: Format,
        values: usize,
        expected: usize,
        found: usize,
    },
    /// Quantizer input that is NaN or infinite; `index` is the first such value.
    #[error("{format}: cannot quantize value {index}: it is {what}")]
    NonFinite {
        format: Format,
        index: usize,
        /// `"NaN"`, `"+inf"` or `"-inf"`.
        what: &'static str,
    },
    /// Quantizer input too large for the f16 fields of the format (|value| >= 65520, which
    /// f16 rounds to infinity); `index` is the first such value.
    #[error("{format}: cannot quantize value {index}: {value} is beyond the f16 range")]
    OutOfRange {
        format: Format,
        index: usize,
        /// The value, as text (the error type is `Eq`).
        value: String,
    },
    /// Importance weights [`Format::quantize_weighted`] cannot use: a count that is not whole
    /// blocks or does not divide the values, or a weight that is negative or not finite.
    #[error("{format}: importance weights: {reason}")]
    Importance { format: Format, reason: String },
    /// A format name [`Format::from_name`] does not know.
    #[error(
        "unknown quantization format {name:?}; valid formats: {}",
        crate::formats::format_names()
    )]
    UnknownFormat { name: String },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
