//! ggml's GGUF types beyond the legacy types and k-quants, laid out as ggml's `block_<type>` in
//! `ggml-common.h`: BF16, which Hearth reads but does not keep (it is converted at load into
//! one of Hearth's [`formats`](crate::formats)), and the lattice i-quants (IQ1_S to IQ3_S) and
//! ternary types (TQ1_0, TQ2_0), whose block structs the formats of the same names use as they
//! are.
//!
//! One module per type family: the block structs and their dequantization, which follows
//! ggml's reference `dequantize_row_<type>` so the values are bit-identical (the lattice and
//! ternary types through their integer levels, see `levels`); `iq*_quantize` hold ggml's
//! quantizers for the lattice types, byte for byte, with the maps and neighbour lists of the
//! grids they build once (the ternary types' quantizers are in `ternary`); `iq_grids` holds
//! the grids themselves, which the GLSL kernels also read (shaders/build.rs generates their
//! includes from it).

pub mod bf16;
pub mod iq1;
pub mod iq1_quantize;
pub mod iq2;
pub mod iq2_quantize;
pub mod iq3;
pub mod iq3_quantize;
mod iq_grid;
pub mod iq_grids;
pub mod ternary;
