//! GGUF tensor types Hearth reads but does not keep: BF16. It is dequantized at load and
//! requantized into one of Hearth's [`formats`](crate::formats).
//!
//! One module per type: the block struct, laid out as ggml's `block_<type>` in
//! `ggml-common.h`, and its dequantization, which follows ggml's reference `dequantize_row_<type>`
//! operation for operation so the values are bit-identical.

pub mod bf16;
