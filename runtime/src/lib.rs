//! Hearth's runtime: the Vulkan device, compute kernels and (later) model execution.
