//! The crate's error type.

use crate::BlockType;

/// Why a tensor could not be dequantized.
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
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
