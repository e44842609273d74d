//! What a physical device can do: the capabilities later kernels choose their variants by.

use ash::vk;
use serde::Serialize;

use super::error::{CallContext, Result};
use super::instance::Instance;

/// Device class, in the order Hearth prefers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Discrete,
    Integrated,
    Virtual,
    Cpu,
    Other,
}

impl DeviceKind {
    fn from_vk(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => Self::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => Self::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => Self::Virtual,
            vk::PhysicalDeviceType::CPU => Self::Cpu,
            _ => Self::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Discrete => "discrete",
            Self::Integrated => "integrated",
            Self::Virtual => "virtual",
            Self::Cpu => "cpu",
            Self::Other => "other",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SubgroupCaps {
    /// Default subgroup size.
    pub size: u32,
    /// Range selectable with subgroup size control (equal to `size` without it).
    pub min_size: u32,
    pub max_size: u32,
    /// Subgroup operations available in compute shaders (basic, arithmetic, shuffle, ...).
    pub operations: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ArithmeticCaps {
    pub shader_float16: bool,
    pub shader_int8: bool,
    /// 64-bit integers in shaders (the wide matrix-vector kernels).
    pub shader_int64: bool,
    pub storage_buffer_8bit: bool,
    pub storage_buffer_16bit: bool,
    /// Dot products of packed 8-bit integers in shaders (`VK_KHR_shader_integer_dot_product`,
    /// which Hearth enables: it asks for Vulkan 1.2): the `matvec_idot` kernels.
    pub integer_dot_product: bool,
    /// The driver says packed 8-bit signed dot products run faster than the arithmetic they
    /// stand for (`integerDotProduct4x8BitPackedSignedAccelerated`): a quick tune tries the
    /// `matvec_idot` kernels only then (lavapipe emulates them).
    pub integer_dot_product_accelerated: bool,
    pub cooperative_matrix: bool,
    /// Buffers read through 64-bit addresses in shaders (the `_wide` kernel variants).
    pub buffer_device_address: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct LimitCaps {
    pub max_workgroup_size: [u32; 3],
    pub max_workgroup_invocations: u32,
    pub max_workgroup_count: [u32; 3],
    pub max_shared_memory: u32,
    pub max_push_constants: u32,
    pub max_storage_buffer_range: u64,
    pub max_memory_allocation_size: u64,
    /// Nanoseconds per timestamp tick; `None` when the compute queue cannot time dispatches.
    pub timestamp_period_ns: Option<f32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryHeap {
    pub size: u64,
    pub device_local: bool,
    /// What this process may still allocate from the heap when the device was queried
    /// (`VK_EXT_memory_budget`: its budget less its use); `None` without the extension.
    pub free: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryCaps {
    pub heaps: Vec<MemoryHeap>,
    /// Some memory type is device-local.
    pub device_local: bool,
    /// Some memory type is host-visible (the KV pool can live there).
    pub host_visible: bool,
    /// Some host-visible type is also host-cached (fast CPU reads back).
    pub host_cached: bool,
    /// A large device-local heap is host-visible (resizable BAR), or the device shares host memory.
    pub rebar: bool,
}

/// Everything Hearth knows about one physical device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceInfo {
    pub index: usize,
    pub name: String,
    pub kind: DeviceKind,
    pub vendor_id: u32,
    pub device_id: u32,
    pub driver: String,
    pub api_version: String,
    pub subgroup: SubgroupCaps,
    pub arithmetic: ArithmeticCaps,
    pub limits: LimitCaps,
    pub memory: MemoryCaps,
    #[serde(skip)]
    pub(crate) api: u32,
    /// Which pipeline caches the driver takes (`pipelineCacheUUID`): it changes with the
    /// driver's version.
    #[serde(skip)]
    pub(crate) pipeline_cache_uuid: [u8; 16],
    #[serde(skip)]
    pub(crate) compute_family: Option<u32>,
}

impl DeviceInfo {
    /// Total size of the device-local heaps.
    pub fn device_local_bytes(&self) -> u64 {
        self.memory
            .heaps
            .iter()
            .filter(|h| h.device_local)
            .map(|h| h.size)
            .sum()
    }

    /// What this process may still allocate from the device-local heaps: their budget less
    /// their use where the driver reports it, else their size.
    pub fn free_device_local_bytes(&self) -> u64 {
        self.memory
            .heaps
            .iter()
            .filter(|h| h.device_local)
            .map(|h| h.free.unwrap_or(h.size).min(h.size))
            .sum()
    }

    /// Total size of the heaps that are not device-local (system memory), or of every heap
    /// on a device whose memory is all host memory.
    pub fn host_bytes(&self) -> u64 {
        let host: u64 = self
            .memory
            .heaps
            .iter()
            .filter(|h| !h.device_local)
            .map(|h| h.size)
            .sum();
        if host > 0 {
            host
        } else {
            self.device_local_bytes()
        }
    }

    /// A one-line summary of the heaps, for error messages.
    pub fn heap_summary(&self) -> String {
        let heaps: Vec<String> = self
            .memory
            .heaps
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let local = if h.device_local {
                    "device-local"
                } else {
                    "host"
                };
                format!("#{i} {} MiB {local}", h.size >> 20)
            })
            .collect();
        heaps.join(", ")
    }
}

const SUBGROUP_OPS: &[(vk::SubgroupFeatureFlags, &str)] = &[
    (vk::SubgroupFeatureFlags::BASIC, "basic"),
    (vk::SubgroupFeatureFlags::VOTE, "vote"),
    (vk::SubgroupFeatureFlags::ARITHMETIC, "arithmetic"),
    (vk::SubgroupFeatureFlags::BALLOT, "ballot"),
    (vk::SubgroupFeatureFlags::SHUFFLE, "shuffle"),
    (
        vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE,
        "shuffle_relative",
    ),
    (vk::SubgroupFeatureFlags::CLUSTERED, "clustered"),
    (vk::SubgroupFeatureFlags::QUAD, "quad"),
];

/// Queries one physical device.
pub(crate) fn query(
    instance: &Instance,
    physical: vk::PhysicalDevice,
    index: usize,
) -> Result<DeviceInfo> {
    let raw = &instance.raw;
    // SAFETY: `physical` was enumerated from this instance; the p_next chains point at locals
    // that outlive each call, and only structs valid for the reported API version are chained.
    unsafe {
        let base = raw.get_physical_device_properties(physical);
        let api = base.api_version;
        let extensions = raw
            .enumerate_device_extension_properties(physical)
            .call("vkEnumerateDeviceExtensionProperties")?;
        let has_ext = |name: &std::ffi::CStr| {
            extensions
                .iter()
                .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
        };

        let mut v11 = vk::PhysicalDeviceVulkan11Properties::default();
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let has_idot_ext = has_ext(ash::khr::shader_integer_dot_product::NAME);
        let mut idot_props = vk::PhysicalDeviceShaderIntegerDotProductProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut v11)
            .push_next(&mut driver);
        let has_size_control =
            api >= vk::API_VERSION_1_3 || has_ext(ash::ext::subgroup_size_control::NAME);
        if has_size_control {
            props2 = props2.push_next(&mut size_control);
        }
        if has_idot_ext {
            props2 = props2.push_next(&mut idot_props);
        }
        raw.get_physical_device_properties2(physical, &mut props2);

        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut idot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
        let mut features2 = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f11)
            .push_next(&mut f12);
        if has_idot_ext {
            features2 = features2.push_next(&mut idot);
        }
        raw.get_physical_device_features2(physical, &mut features2);
        let shader_int64 = features2.features.shader_int64 != 0;

        let families = raw.get_physical_device_queue_family_properties(physical);
        let compute_family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .map(|i| i as u32);
        let timestamp_bits =
            compute_family.map_or(0, |f| families[f as usize].timestamp_valid_bits);

        let mem = raw.get_physical_device_memory_properties(physical);
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let has_budget = has_ext(ash::ext::memory_budget::NAME);
        if has_budget {
            let mut mem2 = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
            raw.get_physical_device_memory_properties2(physical, &mut mem2);
        }
        let heaps: Vec<MemoryHeap> = mem.memory_heaps[..mem.memory_heap_count as usize]
            .iter()
            .enumerate()
            .map(|(i, h)| MemoryHeap {
                size: h.size,
                device_local: h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL),
                free: has_budget
                    .then(|| budget.heap_budget[i].saturating_sub(budget.heap_usage[i]))
                    .filter(|&free| free > 0),
            })
            .collect();
        let types = &mem.memory_types[..mem.memory_type_count as usize];
        let has = |f: vk::MemoryPropertyFlags| types.iter().any(|t| t.property_flags.contains(f));
        let rebar = types.iter().any(|t| {
            t.property_flags.contains(
                vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE,
            ) && heaps
                .get(t.heap_index as usize)
                .is_some_and(|h| h.size > 256 << 20)
        });

        let l = &base.limits;
        let operations = SUBGROUP_OPS
            .iter()
            .filter(|(flag, _)| v11.subgroup_supported_operations.contains(*flag))
            .map(|&(_, name)| name)
            .collect();
        let (min_size, max_size) = if has_size_control && size_control.min_subgroup_size > 0 {
            (
                size_control.min_subgroup_size,
                size_control.max_subgroup_size,
            )
        } else {
            (v11.subgroup_size, v11.subgroup_size)
        };
        Ok(DeviceInfo {
            index,
            name: base
                .device_name_as_c_str()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "<unnamed>".into()),
            kind: DeviceKind::from_vk(base.device_type),
            vendor_id: base.vendor_id,
            device_id: base.device_id,
            driver: format!(
                "{} {}",
                driver
                    .driver_name_as_c_str()
                    .map(|c| c.to_string_lossy())
                    .unwrap_or_default(),
                driver
                    .driver_info_as_c_str()
                    .map(|c| c.to_string_lossy())
                    .unwrap_or_default()
            )
            .trim()
            .to_string(),
            api_version: format!(
                "{}.{}.{}",
                vk::api_version_major(api),
                vk::api_version_minor(api),
                vk::api_version_patch(api)
            ),
            subgroup: SubgroupCaps {
                size: v11.subgroup_size,
                min_size,
                max_size,
                operations,
            },
            arithmetic: ArithmeticCaps {
                shader_float16: f12.shader_float16 != 0,
                shader_int8: f12.shader_int8 != 0,
                shader_int64,
                storage_buffer_8bit: f12.storage_buffer8_bit_access != 0,
                storage_buffer_16bit: f11.storage_buffer16_bit_access != 0,
                integer_dot_product: has_idot_ext && idot.shader_integer_dot_product != 0,
                integer_dot_product_accelerated: has_idot_ext
                    && idot.shader_integer_dot_product != 0
                    && idot_props.integer_dot_product4x8_bit_packed_signed_accelerated != 0,
                cooperative_matrix: has_ext(ash::khr::cooperative_matrix::NAME),
                buffer_device_address: f12.buffer_device_address != 0,
            },
            limits: LimitCaps {
                max_workgroup_size: l.max_compute_work_group_size,
                max_workgroup_invocations: l.max_compute_work_group_invocations,
                max_workgroup_count: l.max_compute_work_group_count,
                max_shared_memory: l.max_compute_shared_memory_size,
                max_push_constants: l.max_push_constants_size,
                max_storage_buffer_range: l.max_storage_buffer_range as u64,
                max_memory_allocation_size: v11.max_memory_allocation_size,
                timestamp_period_ns: (timestamp_bits > 0 && l.timestamp_compute_and_graphics != 0)
                    .then_some(l.timestamp_period),
            },
            memory: MemoryCaps {
                device_local: has(vk::MemoryPropertyFlags::DEVICE_LOCAL),
                host_visible: has(vk::MemoryPropertyFlags::HOST_VISIBLE),
                host_cached: has(
                    vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_CACHED
                ),
                rebar,
                heaps,
            },
            api,
            pipeline_cache_uuid: base.pipeline_cache_uuid,
            compute_family,
        })
    }
}
