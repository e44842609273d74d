//! Compute pipelines from SPIR-V. The descriptor layout comes from reflecting the kernel, the
//! push-constant range from its block size; specialization constants (workgroup size, rows per
//! workgroup, ...) pick the variant. Built once per (kernel, constants) and kept in a
//! `PipelineCache`, which the device owns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ash::vk;
use hearth_shaders::Kernel;

use super::caps::LimitCaps;
use super::error::{CallContext, Result, VkError};
use super::lock::lock;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PipelineKey {
    name: &'static str,
    spec: Vec<u32>,
}

pub struct Pipeline {
    pub name: &'static str,
    pub(crate) raw: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    /// Binding numbers in set 0, ascending: the buffers a dispatch must supply, in order.
    pub(crate) bindings: Vec<u32>,
    /// Per binding: whether the kernel may write it (the recorder orders commands by this).
    pub(crate) writes: Vec<bool>,
    pub(crate) push_size: u32,
    /// Specialization constants, by id (0 is the workgroup size in every kernel).
    pub spec: Vec<u32>,
}

impl Pipeline {
    /// Invocations per workgroup along x (specialization constant 0).
    pub fn workgroup_size(&self) -> u32 {
        self.spec.first().copied().unwrap_or(1)
    }

    /// Builds the pipeline for `kernel` with specialization constants `spec` on `raw`.
    /// Builds `kernel` with constants `spec`, through the driver's pipeline cache `cache`.
    fn build(
        raw: &ash::Device,
        cache: vk::PipelineCache,
        limits: &LimitCaps,
        kernel: Kernel,
        spec: &[u32],
    ) -> Result<Self> {
        let fail = |message: String| VkError::Kernel {
            kernel: kernel.name,
            message,
        };
        let reflection =
            hearth_shaders::reflect(kernel.spirv).map_err(|e| fail(format!("bad SPIR-V: {e}")))?;
        if let Some(&(set, _)) = reflection.bindings.iter().find(|(set, _)| *set != 0) {
            return Err(fail(format!(
                "uses descriptor set {set}; only set 0 is supported"
            )));
        }
        if reflection.push_constant_size > limits.max_push_constants {
            return Err(fail(format!(
                "needs {} bytes of push constants, device allows {}",
                reflection.push_constant_size, limits.max_push_constants
            )));
        }
        let bindings: Vec<u32> = reflection.bindings.iter().map(|&(_, b)| b).collect();
        let layout_bindings: Vec<_> = bindings
            .iter()
            .map(|&b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&layout_bindings);
        // Created objects are destroyed on every error path below, newest first.
        // SAFETY: valid create infos on a live device; the SPIR-V passed reflection.
        unsafe {
            let set_layout = raw
                .create_descriptor_set_layout(&set_info, None)
                .call("vkCreateDescriptorSetLayout")?;
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(reflection.push_constant_size)];
            let set_layouts = [set_layout];
            let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
            if reflection.push_constant_size > 0 {
                layout_info = layout_info.push_constant_ranges(&ranges);
            }
            let layout = match raw.create_pipeline_layout(&layout_info, None) {
                Ok(l) => l,
                Err(result) => {
                    raw.destroy_descriptor_set_layout(set_layout, None);
                    return Err(VkError::Call {
                        call: "vkCreatePipelineLayout",
                        result,
                    });
                }
            };
            let module_info = vk::ShaderModuleCreateInfo::default().code(kernel.spirv);
            let module = match raw.create_shader_module(&module_info, None) {
                Ok(m) => m,
                Err(result) => {
                    raw.destroy_pipeline_layout(layout, None);
                    raw.destroy_descriptor_set_layout(set_layout, None);
                    return Err(fail(format!("shader module rejected: {result}")));
                }
            };
            let entries: Vec<_> = (0..spec.len() as u32)
                .map(|i| vk::SpecializationMapEntry {
                    constant_id: i,
                    offset: i * 4,
                    size: 4,
                })
                .collect();
            let spec_info = vk::SpecializationInfo::default()
                .map_entries(&entries)
                .data(bytemuck::cast_slice(spec));
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(c"main")
                .specialization_info(&spec_info);
            let info = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(layout);
            let created = raw.create_compute_pipelines(cache, &[info], None);
            raw.destroy_shader_module(module, None);
            match created {
                Ok(p) => Ok(Pipeline {
                    name: kernel.name,
                    raw: p[0],
                    layout,
                    set_layout,
                    bindings,
                    writes: reflection.writes.clone(),
                    push_size: reflection.push_constant_size,
                    spec: spec.to_vec(),
                }),
                Err((_, result)) => {
                    raw.destroy_pipeline_layout(layout, None);
                    raw.destroy_descriptor_set_layout(set_layout, None);
                    Err(fail(format!("pipeline creation failed: {result}")))
                }
            }
        }
    }

    /// # Safety
    /// The device must be idle with respect to this pipeline.
    unsafe fn destroy(&self, device: &ash::Device) {
        // SAFETY: guaranteed by the caller.
        unsafe {
            device.destroy_pipeline(self.raw, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

/// The pipelines built so far, kept until the device goes.
#[derive(Default)]
pub(crate) struct PipelineCache {
    built: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
}

impl PipelineCache {
    /// The pipeline for `kernel` with specialization constants `spec` (ids 0, 1, ... in order),
    /// built on `device` on first use.
    pub(crate) fn get(
        &self,
        device: &ash::Device,
        cache: vk::PipelineCache,
        limits: &LimitCaps,
        kernel: Kernel,
        spec: &[u32],
    ) -> Result<Arc<Pipeline>> {
        let key = PipelineKey {
            name: kernel.name,
            spec: spec.to_vec(),
        };
        if let Some(p) = lock(&self.built).get(&key) {
            return Ok(p.clone());
        }
        let pipeline = Arc::new(Pipeline::build(device, cache, limits, kernel, spec)?);
        let mut cache = lock(&self.built);
        // Another thread may have built the same one meanwhile; keep the first.
        match cache.get(&key) {
            Some(existing) => {
                // SAFETY: the new pipeline was never used.
                unsafe { pipeline.destroy(device) };
                Ok(existing.clone())
            }
            None => {
                cache.insert(key, pipeline.clone());
                Ok(pipeline)
            }
        }
    }

    /// Pipelines built so far.
    pub(crate) fn built(&self) -> usize {
        lock(&self.built).len()
    }

    /// # Safety
    /// `device` must be the one every kept pipeline was built on, and idle.
    pub(crate) unsafe fn destroy(&self, device: &ash::Device) {
        for (_, p) in lock(&self.built).drain() {
            // SAFETY: guaranteed by the caller.
            unsafe { p.destroy(device) };
        }
    }
}
