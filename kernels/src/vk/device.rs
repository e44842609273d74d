//! Physical-device choice and the logical device: one compute queue, the memory allocator, and
//! the pipeline and descriptor-set caches it owns. Everything else borrows an `Arc<Device>`.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use hearth_shaders::Kernel;

use super::caps::{self, DeviceInfo};
use super::descriptors::DescriptorCache;
use super::disk_cache;
use super::error::{CallContext, Result, VkError};
use super::instance::{Instance, InstanceDesc};
use super::lock::lock;
use super::pipeline::{Pipeline, PipelineCache};

/// Which device to open and how.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceDesc {
    /// Index into [`list_devices`]; `None` picks the best (discrete > integrated > virtual > cpu).
    pub index: Option<usize>,
    /// Enable the Khronos validation layer when installed.
    pub validation: bool,
}

/// Every Vulkan device on this machine with its capabilities, in enumeration order.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    let instance = Instance::new(InstanceDesc::default())?;
    Ok(enumerate(&instance)?
        .into_iter()
        .map(|(_, info)| info)
        .collect())
}

fn enumerate(instance: &Instance) -> Result<Vec<(vk::PhysicalDevice, DeviceInfo)>> {
    // SAFETY: plain query on a live instance.
    let physicals =
        unsafe { instance.raw.enumerate_physical_devices() }.call("vkEnumeratePhysicalDevices")?;
    physicals
        .into_iter()
        .enumerate()
        .map(|(i, p)| Ok((p, caps::query(instance, p, i)?)))
        .collect()
}

/// Why a device cannot run Hearth, if it cannot.
fn unusable(info: &DeviceInfo) -> Option<String> {
    if info.api < vk::API_VERSION_1_2 {
        return Some(format!("Vulkan {} (1.2 required)", info.api_version));
    }
    if info.compute_family.is_none() {
        return Some("no compute queue".into());
    }
    let ops = &info.subgroup.operations;
    if !ops.contains(&"basic") || !ops.contains(&"arithmetic") {
        return Some("no subgroup arithmetic in compute shaders".into());
    }
    None
}

pub struct Device {
    pub(crate) instance: Arc<Instance>,
    pub(crate) raw: ash::Device,
    info: DeviceInfo,
    queue: Mutex<vk::Queue>,
    pub(crate) queue_family: u32,
    allocator: ManuallyDrop<Mutex<Allocator>>,
    pipelines: PipelineCache,
    /// The driver's cache every pipeline is built through.
    driver_cache: vk::PipelineCache,
    /// Where that cache is kept between runs, and the bytes read from there
    /// ([`keep_pipelines_in`](Self::keep_pipelines_in)).
    cache_file: Mutex<Option<(std::path::PathBuf, usize)>>,
    descriptors: DescriptorCache,
    /// The matrix-vector product shapes a tuner chose here (see `crate::variants`).
    tuned: Mutex<crate::variants::Choices>,
}

impl Device {
    pub fn new(desc: DeviceDesc) -> Result<Arc<Self>> {
        let instance = Instance::new(InstanceDesc {
            validation: desc.validation,
        })?;
        let mut devices = enumerate(&instance)?;
        let chosen = match desc.index {
            Some(index) => {
                if index >= devices.len() {
                    return Err(VkError::BadDeviceIndex {
                        index,
                        count: devices.len(),
                    });
                }
                let (p, info) = devices.swap_remove(index);
                if let Some(missing) = unusable(&info) {
                    return Err(VkError::Unsupported {
                        device: info.name,
                        missing,
                    });
                }
                (p, info)
            }
            None => {
                devices.retain(|(_, info)| unusable(info).is_none());
                devices.sort_by_key(|(_, info)| (info.kind, info.index));
                devices.into_iter().next().ok_or(VkError::NoDevice)?
            }
        };
        Self::open(instance, chosen.0, chosen.1)
    }

    fn open(
        instance: Arc<Instance>,
        physical: vk::PhysicalDevice,
        info: DeviceInfo,
    ) -> Result<Arc<Self>> {
        let queue_family = info.compute_family.ok_or(VkError::NoDevice)?;
        let priorities = [1.0];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        let a = &info.arithmetic;
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(a.storage_buffer_16bit);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(a.shader_float16)
            .shader_int8(a.shader_int8)
            .storage_buffer8_bit_access(a.storage_buffer_8bit)
            .buffer_device_address(a.buffer_device_address);
        let base = vk::PhysicalDeviceFeatures::default().shader_int64(a.shader_int64);
        // A portability implementation (MoltenVK) must have its subset enabled by name.
        // SAFETY: `physical` was enumerated from this instance.
        let extensions = unsafe { instance.raw.enumerate_device_extension_properties(physical) }
            .call("vkEnumerateDeviceExtensionProperties")?;
        let subset = c"VK_KHR_portability_subset";
        let mut ext_names: Vec<*const std::ffi::c_char> = extensions
            .iter()
            .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == subset))
            .then_some(subset.as_ptr())
            .into_iter()
            .collect();
        // The integer-dot products (`matvec_idot`) need the extension and its feature: the
        // device is made for Vulkan 1.2, where both are the extension's.
        let mut idot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(true);
        if a.integer_dot_product {
            ext_names.push(ash::khr::shader_integer_dot_product::NAME.as_ptr());
        }
        let mut create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&ext_names)
            .enabled_features(&base)
            .push_next(&mut f11)
            .push_next(&mut f12);
        if a.integer_dot_product {
            create = create.push_next(&mut idot);
        }
        // SAFETY: only features and extensions the device reported are enabled, and every
        // pointer in `create` refers to locals that outlive the call.
        let raw = unsafe { instance.raw.create_device(physical, &create, None) }
            .call("vkCreateDevice")?;
        // SAFETY: the queue family and index were requested in `create`.
        let queue = unsafe { raw.get_device_queue(queue_family, 0) };
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.raw.clone(),
            device: raw.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: a.buffer_device_address,
            allocation_sizes: Default::default(),
        })
        .map_err(|e| VkError::Allocation {
            what: "allocator".into(),
            message: e.to_string(),
        })?;
        let cache_info = vk::PipelineCacheCreateInfo::default();
        // SAFETY: a valid create info on the device just made.
        let driver_cache = match unsafe { raw.create_pipeline_cache(&cache_info, None) } {
            Ok(cache) => cache,
            Err(result) => {
                // SAFETY: nothing was made on the device yet but the allocator.
                unsafe {
                    drop(allocator);
                    raw.destroy_device(None);
                }
                return Err(VkError::Call {
                    call: "vkCreatePipelineCache",
                    result,
                });
            }
        };
        tracing::info!("using Vulkan device {} ({})", info.name, info.kind.as_str());
        Ok(Arc::new(Self {
            instance,
            raw,
            info,
            queue: Mutex::new(queue),
            queue_family,
            allocator: ManuallyDrop::new(Mutex::new(allocator)),
            pipelines: PipelineCache::default(),
            driver_cache,
            cache_file: Mutex::new(None),
            descriptors: DescriptorCache::default(),
            tuned: Mutex::new(crate::variants::Choices::default()),
        }))
    }

    /// Keeps the pipelines this device builds in `dir` between runs: what an earlier run on
    /// the same device and driver stored there is taken now, and what this run adds is
    /// written back when the device goes. A file that cannot be read only means compiling
    /// again; returns the bytes taken. Call it before the device builds any pipeline (right
    /// after opening it): merging into the cache must not overlap a build through it.
    pub fn keep_pipelines_in(&self, dir: &std::path::Path) -> Result<usize> {
        if self.pipelines.built() > 0 {
            return Err(VkError::Kernel {
                kernel: "pipeline cache",
                message: "must be kept before the device builds pipelines".into(),
            });
        }
        let file = disk_cache::file_for(dir, &self.info);
        let mut kept = lock(&self.cache_file);
        // SAFETY: the cache belongs to this device, and no pipeline has been built through it
        // (checked above; the caller opened the device and has not shared it yet).
        let read =
            unsafe { disk_cache::merge_from(&self.raw, &self.info, self.driver_cache, &file)? };
        tracing::info!("pipeline cache {}: {read} bytes", file.display());
        *kept = Some((file, read));
        Ok(read)
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Products built from now on take the shapes in `choices` where they name one.
    pub fn use_tuning(&self, choices: crate::variants::Choices) {
        *lock(&self.tuned) = choices;
    }

    /// The shapes a tuner chose on this device (empty: untuned).
    pub fn tuning(&self) -> crate::variants::Choices {
        lock(&self.tuned).clone()
    }

    /// Validation messages logged since the last call (empty without the validation layer).
    pub fn take_validation_messages(&self) -> Vec<String> {
        self.instance.validation_log().drain()
    }

    pub fn validating(&self) -> bool {
        self.instance.validating()
    }

    pub(crate) fn allocator(&self) -> MutexGuard<'_, Allocator> {
        lock(&self.allocator)
    }

    pub(crate) fn queue(&self) -> MutexGuard<'_, vk::Queue> {
        lock(&self.queue)
    }

    /// The pipeline for `kernel` with specialization constants `spec` (ids 0, 1, ... in order),
    /// built on first use.
    pub fn pipeline(&self, kernel: Kernel, spec: &[u32]) -> Result<Arc<Pipeline>> {
        self.pipelines.get(
            &self.raw,
            self.driver_cache,
            &self.info.limits,
            kernel,
            spec,
        )
    }

    /// The descriptor set binding `buffers` (whole, in binding order) for `pipeline`, written
    /// on first use and kept until one of the buffers is dropped.
    pub(crate) fn descriptor_set(
        &self,
        pipeline: &Pipeline,
        buffers: Vec<vk::Buffer>,
    ) -> Result<vk::DescriptorSet> {
        self.descriptors.set(&self.raw, pipeline, buffers)
    }

    /// Frees the descriptor sets that bind `buffer`, which is about to be destroyed.
    pub(crate) fn forget_buffer(&self, buffer: vk::Buffer) {
        self.descriptors.forget_buffer(&self.raw, buffer);
    }

    /// Kept descriptor sets, for tests.
    pub fn descriptor_sets_kept(&self) -> usize {
        self.descriptors.len()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: buffers hold an Arc<Device>, so none is alive; after wait-idle no work is in
        // flight, so descriptor pools, pipelines (whose set layouts the pools' sets use) and the
        // device can go, in that order.
        unsafe {
            let _ = self.raw.device_wait_idle();
            if let Some((file, read)) = lock(&self.cache_file).take() {
                if let Err(e) = disk_cache::save(&self.raw, self.driver_cache, &file, read) {
                    tracing::warn!("pipeline cache {}: not saved: {e}", file.display());
                }
            }
            self.raw.destroy_pipeline_cache(self.driver_cache, None);
            self.descriptors.destroy(&self.raw);
            self.pipelines.destroy(&self.raw);
            ManuallyDrop::drop(&mut self.allocator);
            self.raw.destroy_device(None);
        }
    }
}
