//! The plain-CPU reference: f32 operations written for clarity (`ops`, accumulating in f64 so
//! they are a trustworthy oracle for single kernels) and a whole-model forward pass
//! (`forward`), the oracle for the Vulkan executor.

pub mod forward;
pub mod ops;

pub use forward::{CpuKvState, CpuModel};
