//! Vulkan on ash and gpu-allocator: one file per concept.
//!
//! Each file imports only those above it: error -> instance -> caps -> lock -> pipeline ->
//! descriptors -> device -> buffer -> command -> transfer.
//!
//! - `error`: the layer's errors
//! - `instance`: loader, validation layer and its message log
//! - `caps`: what a physical device can do (`DeviceInfo`)
//! - `lock`: taking a mutex even after a panic poisoned it
//! - `pipeline`: compute pipelines from reflected SPIR-V, cached per specialization
//! - `descriptors`: descriptor sets kept per (pipeline, buffers), freed with their buffers
//! - `device`: device choice, the logical device, queue, allocator; owns both caches
//! - `buffer`: device-local / host-visible / readback buffers
//! - `command`: recording dispatches into one submission, fences, timestamps
//! - `transfer`: uploads and downloads, mapped or through chunked staging copies

mod buffer;
mod caps;
mod command;
mod descriptors;
mod device;
mod disk_cache;
mod error;
mod instance;
mod lock;
mod pipeline;
mod transfer;

pub use buffer::{Buffer, BufferDesc, MemoryKind};
pub use caps::{
    ArithmeticCaps, DeviceInfo, DeviceKind, LimitCaps, MemoryCaps, MemoryHeap, SubgroupCaps,
};
pub use command::{Completed, KernelTime, Recorder};
pub use device::{list_devices, Device, DeviceDesc};
pub use error::{Result, VkError};
pub use instance::{Instance, InstanceDesc, ValidationLog, API_VERSION};
pub use pipeline::Pipeline;

#[cfg(test)]
mod tests;
