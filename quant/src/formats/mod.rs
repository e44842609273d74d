//! Hearth's block formats: the layouts weights are stored in on the device.
//!
//! Each module owns one format: its block struct (`#[repr(C)]`, size checked at compile time)
//! and its reference arithmetic, mirrored line for line by `shaders/glsl/include/quant/<name>.glsl`.
//! Q4 and Q8 have the same bytes as GGUF's Q4_1 and Q8_0, so those tensors load as they are.
//! A format's quantization and its reference dot product with an f32 vector belong in its module,
//! beside `dequantize`.
//!
//! Every block struct is built from bytes only (f16 fields included, see [`f16::Half`]), so it
//! has alignment 1 and a `&[u8]` of any alignment can be viewed as a block slice in place.

pub mod f16;
pub mod f32;
pub mod q4;
pub mod q8;
