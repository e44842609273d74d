//! ggml's lattice i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), laid out as
//! ggml's `block_<type>` in `ggml-common.h`; the formats of the same names
//! ([`iq2_xxs`](super::iq2_xxs), ...) use these block structs as they are.
//!
//! One module per family: the block structs and their dequantization, which follows ggml's
//! reference `dequantize_row_<type>` so the values are bit-identical, through their integer
//! levels (see each struct's `levels`); `iq*_quantize` hold ggml's quantizers, byte for byte,
//! with the maps and neighbour lists of the grids they build once; `iq_grids` holds the grids
//! themselves, which the GLSL kernels also read (shaders/build.rs generates their includes
//! from it).

pub mod iq1;
pub mod iq1_quantize;
pub mod iq2;
pub mod iq2_quantize;
pub mod iq3;
pub mod iq3_quantize;
pub(crate) mod iq_grid;
pub mod iq_grids;
