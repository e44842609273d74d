//! Buffers: device-local (weights, activations), host-visible (the KV pool, uploads) and readback.
//! Each owns its memory and frees it on drop; a `Recorder` borrows the buffers it uses, so none
//! can be dropped while recorded work may still read it. Filling and reading them is
//! `transfer`'s part.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

use super::device::Device;
use super::error::{CallContext, Result, VkError};

/// Where a buffer's memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Fastest for the device; filled through a staging buffer.
    DeviceLocal,
    /// System memory the device reads directly (mapped; written by the CPU).
    HostVisible,
    /// Mapped and host-cached: for reading results back.
    Readback,
    /// System memory, never device-local even where the device offers host-visible device
    /// memory: large pools (the offloaded KV cache) that the device reads over the bus.
    HostPool,
}

impl MemoryKind {
    fn location(self) -> MemoryLocation {
        match self {
            Self::DeviceLocal => MemoryLocation::GpuOnly,
            Self::HostVisible => MemoryLocation::CpuToGpu,
            Self::Readback | Self::HostPool => MemoryLocation::GpuToCpu,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::DeviceLocal => "device-local",
            Self::HostVisible => "host-visible",
            Self::Readback => "readback",
            Self::HostPool => "host pool",
        }
    }
}

/// How to create a buffer.
#[derive(Clone, Copy, Debug)]
pub struct BufferDesc<'a> {
    pub name: &'a str,
    pub size: u64,
    pub memory: MemoryKind,
}

impl<'a> BufferDesc<'a> {
    pub fn device_local(name: &'a str, size: u64) -> Self {
        Self {
            name,
            size,
            memory: MemoryKind::DeviceLocal,
        }
    }
    pub fn host_visible(name: &'a str, size: u64) -> Self {
        Self {
            name,
            size,
            memory: MemoryKind::HostVisible,
        }
    }
    pub fn host_pool(name: &'a str, size: u64) -> Self {
        Self {
            name,
            size,
            memory: MemoryKind::HostPool,
        }
    }
    pub fn readback(name: &'a str, size: u64) -> Self {
        Self {
            name,
            size,
            memory: MemoryKind::Readback,
        }
    }
}

/// Alignment of every buffer's device address: shaders read through one in words of up to
/// 16 bytes (`include/address.glsl`).
const ADDRESS_ALIGN: u64 = 16;

pub struct Buffer {
    device: Arc<Device>,
    pub(crate) raw: vk::Buffer,
    allocation: Option<Allocation>,
    size: u64,
    memory: MemoryKind,
    name: String,
    address: Option<u64>,
}

impl Buffer {
    pub fn new(device: &Arc<Device>, desc: BufferDesc<'_>) -> Result<Self> {
        let limits = &device.info().limits;
        // Vulkan forbids empty buffers; a zero-sized tensor still gets a valid binding.
        // Rounded to whole 8-byte words: f16 kernels read 32-bit words and the wide
        // matrix-vector kernels 64-bit ones, the last possibly part-used.
        let size = desc.size.max(8).next_multiple_of(8);
        for (limit_name, limit) in [
            ("maxMemoryAllocationSize", limits.max_memory_allocation_size),
            ("maxStorageBufferRange", limits.max_storage_buffer_range),
        ] {
            if size > limit {
                return Err(VkError::TooLarge {
                    what: desc.name.into(),
                    size,
                    limit_name,
                    limit,
                });
            }
        }
        let mut usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        if device.info().arithmetic.buffer_device_address {
            usage |= vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
        }
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info on a live device.
        let raw = unsafe { device.raw.create_buffer(&info, None) }.call("vkCreateBuffer")?;
        // SAFETY: `raw` was just created on this device.
        let mut requirements = unsafe { device.raw.get_buffer_memory_requirements(raw) };
        if device.info().arithmetic.buffer_device_address {
            // Shaders read through the address in words of up to 16 bytes.
            requirements.alignment = requirements.alignment.max(ADDRESS_ALIGN);
        }
        let allocated = device.allocator().allocate(&AllocationCreateDesc {
            name: desc.name,
            requirements,
            location: desc.memory.location(),
            linear: true,
            allocation_scheme: AllocationScheme::GpuAllocatorManaged,
        });
        let allocation = match allocated {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer is unbound and unused.
                unsafe { device.raw.destroy_buffer(raw, None) };
                return Err(match e {
                    gpu_allocator::AllocationError::OutOfMemory => VkError::OutOfMemory {
                        size,
                        what: desc.name.into(),
                        location: desc.memory.as_str(),
                        heaps: device.info().heap_summary(),
                    },
                    other => VkError::Allocation {
                        what: desc.name.into(),
                        message: other.to_string(),
                    },
                });
            }
        };
        let mut buffer = Self {
            device: device.clone(),
            raw,
            allocation: Some(allocation),
            size,
            memory: desc.memory,
            name: desc.name.into(),
            address: None,
        };
        let a = buffer
            .allocation
            .as_ref()
            .expect("allocation set just above");
        // SAFETY: memory and offset come from an allocation made for this buffer's requirements.
        unsafe { device.raw.bind_buffer_memory(raw, a.memory(), a.offset()) }
            .call("vkBindBufferMemory")?;
        if device.info().arithmetic.buffer_device_address {
            let info = vk::BufferDeviceAddressInfo::default().buffer(raw);
            // SAFETY: the buffer has SHADER_DEVICE_ADDRESS usage on a device with the feature
            // enabled, and is bound to memory allocated with the address flag (the allocator
            // sets it on every allocation there).
            let address = unsafe { device.raw.get_buffer_device_address(&info) };
            if address % ADDRESS_ALIGN != 0 {
                return Err(VkError::Allocation {
                    what: desc.name.into(),
                    message: format!(
                        "device address {address:#x} is not {ADDRESS_ALIGN}-byte aligned"
                    ),
                });
            }
            buffer.address = Some(address);
        }
        Ok(buffer)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The buffer's address, for shaders that read it through one (`include/address.glsl`),
    /// a multiple of `ADDRESS_ALIGN`; `None` where the device has no buffer device addresses.
    pub fn device_address(&self) -> Option<u64> {
        self.address
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn memory(&self) -> MemoryKind {
        self.memory
    }

    pub(super) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The buffer's memory, where it is mapped.
    pub(super) fn mapped(&self) -> Option<*mut u8> {
        self.allocation
            .as_ref()?
            .mapped_ptr()
            .map(|p| p.as_ptr().cast::<u8>())
    }

    /// An error unless `len` bytes at `offset` lie inside the buffer.
    pub(super) fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.size)
        {
            return Err(VkError::Allocation {
                what: self.name.clone(),
                message: format!(
                    "access of {len} bytes at offset {offset} is past the end ({} bytes)",
                    self.size
                ),
            });
        }
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.device.forget_buffer(self.raw);
        // SAFETY: recorders borrow every buffer they use and wait for completion, so the device
        // no longer uses this one.
        unsafe { self.device.raw.destroy_buffer(self.raw, None) };
        if let Some(a) = self.allocation.take() {
            if let Err(e) = self.device.allocator().free(a) {
                tracing::warn!("freeing buffer {}: {e}", self.name);
            }
        }
    }
}
