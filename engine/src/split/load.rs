//! Loading a model across executors: the devices opened, the layer plan made from their free
//! memory, and each part loaded onto its executor; a plan of one part loads that executor
//! alone, whole.

use std::sync::Arc;

use hearth_cpu::{CpuOptions, NativeModel};
use hearth_kernels::vk::{Device, DeviceDesc};
use hearth_kernels::WeightFormat;
use hearth_model::kv::{KvBudget, BLOCK_TOKENS};
use hearth_model::{Backend, ModelConfig, Part, ProgressFn, Result, Stage};
use hearth_models::{GgufFile, ResolvedModel};
use hearth_vulkan::{VkModel, VkModelOptions};

use super::plan::{CacheSizes, DeviceRoom, Executor, GpuLayers, LayerPlan, Sizer, SplitMode};
use super::Split;
use crate::EngineOptions;

/// Device memory left free when the room is not given (`--gpu-memory`): the driver's own
/// allocations and the pipelines.
pub const HEADROOM: u64 = 512 << 20;

/// A loaded model on its executors.
pub struct Loaded {
    pub backend: Box<dyn Backend + Send>,
    /// Where it runs, for reports: each executor's device, joined.
    pub device: String,
    pub weight_formats: Vec<(WeightFormat, u64)>,
    pub plan: LayerPlan,
}

/// What the split needs besides the devices.
pub struct SplitOptions<'a> {
    pub gpu_layers: GpuLayers,
    /// Each device's share of the GPU layers; empty: by free memory.
    pub shares: &'a [f64],
    /// Whole layers on each device, or layers divided by rows.
    pub mode: SplitMode,
    /// Bytes each device may hold; `None`: its free memory less [`HEADROOM`].
    pub gpu_memory: Option<u64>,
    pub sizes: CacheSizes,
    pub cpu: CpuOptions,
    pub vulkan: VkModelOptions,
}

/// Plans and loads `file` across the CPU and `devices` (opened, in the order their layers
/// come; one device may be opened twice, as tests do).
pub fn load(
    file: &GgufFile,
    model: &ResolvedModel,
    config: &ModelConfig,
    devices: &[Arc<Device>],
    options: &SplitOptions,
    progress: &mut ProgressFn,
) -> Result<Loaded> {
    let rooms = rooms(devices, options.gpu_memory);
    let sizer = Sizer {
        file,
        model,
        config,
        sizes: options.sizes,
    };
    let plan = sizer.plan(options.gpu_layers, &rooms, options.shares, options.mode)?;
    tracing::info!(
        "{} of {} layers on the GPU ({}): {}",
        plan.gpu_layers(),
        config.n_layer,
        options.gpu_layers,
        plan.describe()
    );
    let kv_budget = Some(KvBudget::Tokens(plan.kv_blocks * BLOCK_TOKENS));
    let whole = plan.parts.len() == 1;
    // A whole model on one executor sizes its cache as it always has.
    let part_budget = match whole {
        true => options.sizes.kv_budget,
        false => kv_budget,
    };
    let mut stages: Vec<Box<dyn Stage>> = Vec::new();
    let mut names = Vec::new();
    let mut formats: Vec<(WeightFormat, u64)> = Vec::new();
    for part in &plan.parts {
        let layers = (!whole).then(|| part.layers.clone());
        match part.executor {
            Executor::Cpu => {
                let cpu = CpuOptions {
                    kv_budget: part_budget,
                    ..options.cpu
                };
                let m = NativeModel::load_part(file, model, cpu, layers, progress)?;
                names.push(format!("CPU ({}, {} threads)", m.isa(), m.threads()));
                add_formats(&mut formats, m.weight_formats());
                stages.push(Box::new(m));
            }
            Executor::Vulkan(slot) => {
                let device = &devices[slot];
                let vk = VkModelOptions {
                    kv_budget: part_budget,
                    ..options.vulkan
                };
                let part = match whole {
                    true => Part::whole(config.n_layer),
                    false => part.part(config.n_layer)?,
                };
                let m = VkModel::load_stage(device, file, model, vk, part, progress)?;
                names.push(device.info().name.clone());
                add_formats(&mut formats, m.weight_formats());
                stages.push(Box::new(m));
            }
        }
    }
    formats.sort_by_key(|&(_, bytes)| std::cmp::Reverse(bytes));
    let backend = match whole {
        true => stages.pop().expect("one part").into_backend(),
        false => Box::new(Split::new(stages)?),
    };
    Ok(Loaded {
        backend,
        device: names.join(" + "),
        weight_formats: formats,
        plan,
    })
}

/// Each device's room for the model. A device named more than once holds several parts
/// (this measures what crossing between parts costs) and shares its room among them.
pub fn rooms(devices: &[Arc<Device>], gpu_memory: Option<u64>) -> Vec<DeviceRoom> {
    devices
        .iter()
        .map(|d| {
            let index = d.info().index;
            let times = devices.iter().filter(|o| o.info().index == index).count();
            let r = room(d, gpu_memory);
            DeviceRoom {
                free: r.free / times as u64,
                ..r
            }
        })
        .collect()
}

/// Device `d`'s room for the model: `gpu_memory` where given, else its free memory less the
/// headroom.
pub fn room(d: &Device, gpu_memory: Option<u64>) -> DeviceRoom {
    let info = d.info();
    DeviceRoom {
        index: info.index,
        name: info.name.clone(),
        free: gpu_memory.unwrap_or_else(|| info.free_device_local_bytes().saturating_sub(HEADROOM)),
        max_range: info.limits.max_storage_buffer_range,
    }
}

fn add_formats(into: &mut Vec<(WeightFormat, u64)>, more: Vec<(WeightFormat, u64)>) {
    for (format, bytes) in more {
        match into.iter_mut().find(|(f, _)| *f == format) {
            Some(entry) => entry.1 += bytes,
            None => into.push((format, bytes)),
        }
    }
}

/// Opens the devices `options` name: `devices` (one may be named twice, as two devices
/// sharing its memory), else the one `device` picks (the best where `None`); each keeps its
/// pipelines in `pipeline_cache` where that is set.
pub fn open_devices(options: &EngineOptions) -> Result<Vec<Arc<Device>>> {
    let indices: Vec<Option<usize>> = match options.devices.as_slice() {
        [] => vec![options.device],
        some => some.iter().map(|&i| Some(i)).collect(),
    };
    let mut opened = Vec::new();
    for index in indices {
        let device = Device::new(DeviceDesc {
            index,
            validation: options.validate,
        })?;
        if let Some(dir) = &options.pipeline_cache {
            // Without the cache the kernels compile as they would have: a warning, no error.
            if let Err(e) = device.keep_pipelines_in(dir) {
                tracing::warn!("pipeline cache in {}: {e}", dir.display());
            }
        }
        opened.push(device);
    }
    Ok(opened)
}
