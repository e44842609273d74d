//! The plain-CPU reference: f32 operations written for clarity (`ops`, accumulating in f64 so
//! they are a trustworthy oracle for single kernels) and a whole-model forward pass
//! (`forward`, with its KV policies in `policy`), the oracle for the Vulkan executor.

pub mod activations;
pub mod forward;
mod matmul;
pub(crate) mod moe;
pub mod ops;
mod policy;

pub use forward::{CpuKvState, CpuModel};

use forward::CpuLayer;
