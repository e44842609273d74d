//! GGUF tensor types Hearth reads but does not keep: the k-quants (Q2_K to Q6_K) and BF16.
//! They are dequantized at load and requantized into one of Hearth's
//! [`formats`](crate::formats).
//!
//! One module per type: the block struct, laid out as ggml's `block_<type>` in
//! `ggml-common.h`, and its dequantization, which follows ggml's reference `dequantize_row_<type>`
//! operation for operation so the values are bit-identical.

pub mod bf16;
pub mod q2_k;
pub mod q3_k;
pub mod q4_k;
pub mod q5_k;
pub mod q6_k;

/// Values per super-block of the k-quants.
pub const QK_K: usize = 256;

/// Bytes of packed 6-bit scales (and mins) in a Q3_K, Q4_K or Q5_K super-block.
pub const K_SCALE_SIZE: usize = 12;
