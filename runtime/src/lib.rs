//! Hearth's runtime: the Vulkan device (`vk`), compute kernels (`kernels`), model execution on
//! Vulkan and on the CPU reference (`model`, `cpu`), the KV cache (`kv`), sampling (`sample`)
//! and text generation (`session`, `sched`); the engine on a thread of its own, taking requests
//! from the server, the chat and the app (`service`); synthetic models of a given shape
//! (`synthetic`); the benchmarks (`bench`).

pub mod beam;
pub mod bench;
pub mod cpu;
pub mod engine;
mod error;
pub mod kernels;
pub mod kv;
pub mod model;
pub mod quantize;
pub mod sample;
pub mod sched;
pub mod service;
pub mod session;
pub mod synthetic;
pub mod vk;

pub use error::{Error, Result};

/// The Vulkan version Hearth asks for and what compiled its kernels, one per line, for
/// version reports.
pub fn build_info() -> String {
    let api = vk::API_VERSION;
    format!(
        "Vulkan API {}.{}\nkernels: {}",
        ash::vk::api_version_major(api),
        ash::vk::api_version_minor(api),
        hearth_shaders::COMPILER
    )
}

#[cfg(test)]
pub(crate) mod testing;
