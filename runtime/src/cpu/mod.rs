//! The plain-CPU reference: f32 operations written for clarity, accumulating in f64 so that
//! they are a trustworthy oracle for the Vulkan kernels.

pub mod ops;
