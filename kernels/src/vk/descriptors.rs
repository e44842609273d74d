//! Descriptor sets, written once per (pipeline, buffers) and kept until one of their buffers is
//! dropped. A decode step binds the same weights and activations every time, so binding a kept
//! set replaces writing descriptors at every dispatch: on lavapipe each pushed set cost about
//! 10 µs of the queue's time, a third of a small dispatch.

use std::collections::HashMap;
use std::sync::Mutex;

use ash::vk;

use super::error::{CallContext, Result};
use super::lock::lock;
use super::pipeline::Pipeline;

/// Sets per pool, and storage-buffer descriptors per pool (room for the widest kernel's
/// bindings in every set).
const POOL_SETS: u32 = 256;
const POOL_DESCRIPTORS: u32 = POOL_SETS * 8;

#[derive(Clone, PartialEq, Eq, Hash)]
struct SetKey {
    layout: vk::DescriptorSetLayout,
    buffers: Vec<vk::Buffer>,
}

/// The sets kept so far, and the pools they come from; the device owns one.
#[derive(Default)]
pub(crate) struct DescriptorCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    pools: Vec<vk::DescriptorPool>,
    sets: HashMap<SetKey, (vk::DescriptorSet, vk::DescriptorPool)>,
    /// The keys of the sets each buffer is bound in, to free them when it is dropped.
    by_buffer: HashMap<vk::Buffer, Vec<SetKey>>,
}

impl DescriptorCache {
    /// The descriptor set binding `buffers` (whole, in binding order) for `pipeline`, written
    /// on `device` on first use. Pipelines live as long as the device, so their set layouts are
    /// never reused for another pipeline while a set keyed by one is kept.
    pub(crate) fn set(
        &self,
        device: &ash::Device,
        pipeline: &Pipeline,
        buffers: Vec<vk::Buffer>,
    ) -> Result<vk::DescriptorSet> {
        let key = SetKey {
            layout: pipeline.set_layout,
            buffers,
        };
        let mut cache = lock(&self.kept);
        if let Some(&(set, _)) = cache.sets.get(&key) {
            return Ok(set);
        }
        let (set, pool) = allocate_set(device, &mut cache, pipeline.set_layout)?;
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = key
            .buffers
            .iter()
            .map(|&buffer| {
                [vk::DescriptorBufferInfo {
                    buffer,
                    offset: 0,
                    range: vk::WHOLE_SIZE,
                }]
            })
            .collect();
        let writes: Vec<vk::WriteDescriptorSet> = pipeline
            .bindings
            .iter()
            .zip(&infos)
            .map(|(&binding, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the set was just allocated with this layout and no command uses it yet; the
        // buffers are alive (the caller borrows them).
        unsafe { device.update_descriptor_sets(&writes, &[]) };
        for &buffer in &key.buffers {
            let keys = cache.by_buffer.entry(buffer).or_default();
            if !keys.contains(&key) {
                keys.push(key.clone());
            }
        }
        cache.sets.insert(key, (set, pool));
        Ok(set)
    }

    /// Frees the sets that bind `buffer`, which is about to be destroyed.
    pub(crate) fn forget_buffer(&self, device: &ash::Device, buffer: vk::Buffer) {
        let mut cache = lock(&self.kept);
        let Some(keys) = cache.by_buffer.remove(&buffer) else {
            return;
        };
        for key in keys {
            let Some((set, pool)) = cache.sets.remove(&key) else {
                continue;
            };
            for other in key.buffers.iter().filter(|&&b| b != buffer) {
                if let Some(list) = cache.by_buffer.get_mut(other) {
                    list.retain(|k| k != &key);
                    if list.is_empty() {
                        cache.by_buffer.remove(other);
                    }
                }
            }
            // SAFETY: recorders borrow the buffers they bind and wait for their work, so no
            // pending command uses a set of a buffer being dropped; the pool allows freeing.
            if let Err(e) = unsafe { device.free_descriptor_sets(pool, &[set]) } {
                tracing::warn!("freeing a descriptor set: {e}");
            }
        }
    }

    /// Sets kept.
    pub(crate) fn len(&self) -> usize {
        lock(&self.kept).sets.len()
    }

    /// Destroys every pool, and with them every set.
    ///
    /// # Safety
    /// `device` must be the one the pools were made on, and idle.
    pub(crate) unsafe fn destroy(&self, device: &ash::Device) {
        let mut cache = lock(&self.kept);
        cache.sets.clear();
        cache.by_buffer.clear();
        for pool in cache.pools.drain(..) {
            // SAFETY: guaranteed by the caller; the sets go with their pool.
            unsafe { device.destroy_descriptor_pool(pool, None) };
        }
    }
}

/// A set with `layout` from the newest pool, or from a new one when that one is full.
fn allocate_set(
    device: &ash::Device,
    cache: &mut Kept,
    layout: vk::DescriptorSetLayout,
) -> Result<(vk::DescriptorSet, vk::DescriptorPool)> {
    let layouts = [layout];
    // The newest pool first; a full one (or a fragmented one) makes way for a new pool.
    if let Some(&pool) = cache.pools.last() {
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(pool)
            .set_layouts(&layouts);
        // SAFETY: a live pool and layout.
        match unsafe { device.allocate_descriptor_sets(&info) } {
            Ok(sets) => return Ok((sets[0], pool)),
            Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL) => {}
            Err(e) => return Err(e).call("vkAllocateDescriptorSets"),
        }
    }
    let sizes = [vk::DescriptorPoolSize {
        ty: vk::DescriptorType::STORAGE_BUFFER,
        descriptor_count: POOL_DESCRIPTORS,
    }];
    let pool_info = vk::DescriptorPoolCreateInfo::default()
        .flags(vk::DescriptorPoolCreateFlags::FREE_DESCRIPTOR_SET)
        .max_sets(POOL_SETS)
        .pool_sizes(&sizes);
    // SAFETY: valid create info on a live device.
    let pool = unsafe { device.create_descriptor_pool(&pool_info, None) }
        .call("vkCreateDescriptorPool")?;
    cache.pools.push(pool);
    let info = vk::DescriptorSetAllocateInfo::default()
        .descriptor_pool(pool)
        .set_layouts(&layouts);
    // SAFETY: a live pool, fresh, with room for any kernel's set.
    let sets =
        unsafe { device.allocate_descriptor_sets(&info) }.call("vkAllocateDescriptorSets")?;
    Ok((sets[0], pool))
}
