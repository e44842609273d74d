//! GGUF tensor types Hearth reads but does not keep: Q4_0, Q5_0, Q5_1 and BF16. They are
//! dequantized at load and requantized into one of Hearth's [`formats`](crate::formats).
//!
//! One module per type: the block struct, laid out as ggml's `block_<type>` in
//! `ggml-common.h`, and its dequantization, which follows ggml's reference `dequantize_row_<type>`
//! operation for operation so the values are bit-identical.

pub mod bf16;
pub mod q4_0;
pub mod q5_0;
pub mod q5_1;
