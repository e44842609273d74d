//! Hearth's native CPU executor: the model's products as integer dot products of quantized
//! weights with activations quantized once per product (`act`, `levels`), in SIMD kernels
//! for the instruction set the running CPU reports (`isa`, `dot`), split by rows over a
//! persistent thread pool.

pub mod act;
// The SIMD kernels and their dispatch call intrinsics; each unsafe block says why it is sound.
#[allow(unsafe_code)]
pub mod dot;
mod encoder;
mod executor;
pub mod interleave;
pub mod isa;
pub mod levels;
pub mod panel;
pub mod product;
mod seq2seq;
pub mod weights;

pub use act::Activations;
pub use encoder::NativeEncoder;
pub use executor::{default_threads, CpuOptions, NativeModel};

pub use isa::Isa;
pub use seq2seq::{NativeProduct, NativeSeq2Seq};
