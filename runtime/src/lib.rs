//! Hearth's runtime: the Vulkan device (`vk`), compute kernels (`kernels`) and the CPU reference
//! operations they are tested against (`cpu`).

pub mod cpu;
pub mod kernels;
pub mod vk;

#[cfg(test)]
pub(crate) mod testing;
