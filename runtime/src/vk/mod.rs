//! Vulkan on ash and gpu-allocator: one file per concept.
//!
//! - `instance`: loader, validation layer and its message log
//! - `caps`: what a physical device can do (`DeviceInfo`)
//! - `device`: device choice, the logical device, queue, allocator, pools
//! - `buffer`: device-local / host-visible / readback buffers, chunked staging transfers
//! - `pipeline`: compute pipelines from reflected SPIR-V, cached per specialization
//! - `command`: recording dispatches into one submission, fences, timestamps

mod buffer;
mod caps;
mod command;
mod descriptors;
mod device;
mod error;
mod instance;
mod pipeline;

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
