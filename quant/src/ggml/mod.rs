//! GGUF tensor types Hearth reads but does not keep: BF16, the i-quants (IQ1_S through IQ3_S),
//! TQ1_0 and TQ2_0. They are dequantized at load and requantized into one of Hearth's
//! [`formats`](crate::formats).
//!
//! One module per type: the block struct, laid out as ggml's `block_<type>` in
//! `ggml-common.h`, and its dequantization, which follows ggml's reference `dequantize_row_<type>`
//! operation for operation so the values are bit-identical.

pub mod bf16;
pub mod iq1;
pub mod iq2;
pub mod iq3;
mod iq_grid;
mod iq_grids;
pub mod ternary;
