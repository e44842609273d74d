//! Recording and submitting work. A `Recorder` collects dispatches and copies into one command
//! buffer, puts a memory barrier before each command that touches a buffer in conflict with a
//! command since the last barrier, optionally times each with timestamp queries, and `submit`
//! runs it all in one submission and waits on a fence.
//!
//! Commands between two barriers are independent, so a GPU may run them at once: a layer's
//! InfiniGen fetch, recorded between the previous layer's kernels, overlaps their compute.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use ash::vk;
use bytemuck::Pod;

use super::buffer::Buffer;
use super::device::Device;
use super::error::{CallContext, Result, VkError};
use super::pipeline::Pipeline;

/// Most timestamps one submission records (two per command).
const MAX_QUERIES: u32 = 8192;

/// GPU time of one recorded command.
#[derive(Clone, Debug)]
pub struct KernelTime {
    pub label: &'static str,
    /// Start, from the submission's first timestamp.
    pub start_ns: f64,
    pub ns: f64,
}

impl KernelTime {
    fn end_ns(&self) -> f64 {
        self.start_ns + self.ns
    }
}

/// What a submission took.
#[derive(Clone, Debug, Default)]
pub struct Completed {
    /// Host time from submit to fence signal.
    pub wall: Duration,
    /// Per-command GPU times, when the recorder was created with timing on.
    pub kernels: Vec<KernelTime>,
    /// Every command's label and group: commands of one group had no barrier between them,
    /// so a device may run them together.
    pub groups: Vec<(&'static str, usize)>,
}

impl Completed {
    /// Sum of the GPU times of the commands labelled `label`.
    pub fn kernel_ns(&self, label: &str) -> f64 {
        self.kernels
            .iter()
            .filter(|k| k.label == label)
            .map(|k| k.ns)
            .sum()
    }

    /// How many commands are labelled in `these`, and how many of them share their group with
    /// a command that is not: work recorded to run alongside the rest.
    pub fn alongside(&self, these: &[&str]) -> (usize, usize) {
        let mine = |label: &str| these.contains(&label);
        let shared = |group: usize| {
            self.groups
                .iter()
                .any(|&(label, g)| g == group && !mine(label))
        };
        self.groups
            .iter()
            .filter(|(label, _)| mine(label))
            .fold((0, 0), |(n, s), &(_, g)| {
                (n + 1, s + usize::from(shared(g)))
            })
    }

    /// Time during which a command labelled in `these` ran while any other command ran too:
    /// the part of their work hidden behind the rest.
    pub fn overlap_ns(&self, these: &[&str]) -> f64 {
        let others = merged_spans(self.kernels.iter().filter(|k| !these.contains(&k.label)));
        merged_spans(self.kernels.iter().filter(|k| these.contains(&k.label)))
            .iter()
            .map(|&(a0, a1)| {
                others
                    .iter()
                    .map(|&(b0, b1)| (a1.min(b1) - a0.max(b0)).max(0.0))
                    .sum::<f64>()
            })
            .sum()
    }
}

/// The union of the commands' [start, end) spans, as sorted disjoint spans.
fn merged_spans<'k>(kernels: impl Iterator<Item = &'k KernelTime>) -> Vec<(f64, f64)> {
    let mut spans: Vec<(f64, f64)> = kernels.map(|k| (k.start_ns, k.end_ns())).collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// The buffers read and written since the last barrier.
#[derive(Default)]
struct Hazards {
    read: Vec<vk::Buffer>,
    written: Vec<vk::Buffer>,
}

impl Hazards {
    /// Whether a command reading `reads` and writing `writes` must wait for the commands since
    /// the last barrier: it reads what they write, or writes what they read or write.
    fn conflict(&self, reads: &[vk::Buffer], writes: &[vk::Buffer]) -> bool {
        reads.iter().any(|b| self.written.contains(b))
            || writes
                .iter()
                .any(|b| self.written.contains(b) || self.read.contains(b))
    }

    fn is_empty(&self) -> bool {
        self.read.is_empty() && self.written.is_empty()
    }

    fn add(&mut self, reads: &[vk::Buffer], writes: &[vk::Buffer]) {
        self.read.extend_from_slice(reads);
        self.written.extend_from_slice(writes);
    }

    fn clear(&mut self) {
        self.read.clear();
        self.written.clear();
    }
}

pub struct Recorder<'a> {
    device: &'a Device,
    /// Command pools must not be used from two threads at once; one per recorder avoids locks.
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    queries: Option<vk::QueryPool>,
    labels: Vec<&'static str>,
    /// Each command's group (the barriers before it).
    groups: Vec<usize>,
    hazards: Hazards,
    /// Barriers recorded so far.
    barriers: usize,
    /// The buffers recorded here must outlive the recorder (it waits for completion).
    _buffers: PhantomData<&'a Buffer>,
}

impl<'a> Recorder<'a> {
    pub fn new(device: &'a Device) -> Result<Self> {
        Self::create(device, false)
    }

    /// A recorder that times each command (when the device supports timestamps).
    pub fn timed(device: &'a Device) -> Result<Self> {
        Self::create(device, device.info().limits.timestamp_period_ns.is_some())
    }

    fn create(device: &'a Device, timed: bool) -> Result<Self> {
        let pool_info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.queue_family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: valid create info on a live device.
        let pool = unsafe { device.raw.create_command_pool(&pool_info, None) }
            .call("vkCreateCommandPool")?;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool was just created and outlives the command buffer.
        let cmd = match unsafe { device.raw.allocate_command_buffers(&info) } {
            Ok(c) => c[0],
            Err(result) => {
                // SAFETY: nothing was allocated from the pool.
                unsafe { device.raw.destroy_command_pool(pool, None) };
                return Err(VkError::Call {
                    call: "vkAllocateCommandBuffers",
                    result,
                });
            }
        };
        let mut rec = Self {
            device,
            pool,
            cmd,
            queries: None,
            labels: Vec::new(),
            groups: Vec::new(),
            hazards: Hazards::default(),
            barriers: 0,
            _buffers: PhantomData,
        };
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: a freshly allocated command buffer; `rec` frees it on every error path.
        unsafe { device.raw.begin_command_buffer(cmd, &begin) }.call("vkBeginCommandBuffer")?;
        if timed {
            let info = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(MAX_QUERIES);
            // SAFETY: valid create info; the pool is reset before first use below.
            unsafe {
                let pool = device
                    .raw
                    .create_query_pool(&info, None)
                    .call("vkCreateQueryPool")?;
                rec.queries = Some(pool);
                device.raw.cmd_reset_query_pool(cmd, pool, 0, MAX_QUERIES);
            }
        }
        Ok(rec)
    }

    fn timestamp(&mut self, stage: vk::PipelineStageFlags) {
        if let Some(pool) = self.queries {
            let index = self.labels.len() as u32 * 2
                + u32::from(stage == vk::PipelineStageFlags::BOTTOM_OF_PIPE);
            if index < MAX_QUERIES {
                // SAFETY: recording into our command buffer; index is within the pool.
                unsafe {
                    self.device
                        .raw
                        .cmd_write_timestamp(self.cmd, stage, pool, index)
                };
            }
        }
    }

    /// Orders a command with these accesses after everything recorded before it when it
    /// conflicts with a command since the last barrier; otherwise the two may run together.
    fn barrier_before_command(&mut self, reads: &[vk::Buffer], writes: &[vk::Buffer]) {
        if self.hazards.conflict(reads, writes) {
            self.emit_barrier();
        }
        self.hazards.add(reads, writes);
        self.groups.push(self.barriers);
    }

    /// Orders everything recorded after this after everything recorded before, whatever
    /// they access (commands otherwise wait only for those whose buffers they share).
    pub fn barrier(&mut self) {
        if !self.hazards.is_empty() {
            self.emit_barrier();
        }
    }

    fn emit_barrier(&mut self) {
        self.hazards.clear();
        self.barriers += 1;
        let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
        let barrier = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(
                vk::AccessFlags::SHADER_READ
                    | vk::AccessFlags::SHADER_WRITE
                    | vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE,
            );
        // SAFETY: recording into our command buffer.
        unsafe {
            self.device.raw.cmd_pipeline_barrier(
                self.cmd,
                stages,
                stages,
                vk::DependencyFlags::empty(),
                &[barrier],
                &[],
                &[],
            )
        };
    }

    /// Records one dispatch of `pipeline` with `buffers` bound to its bindings in order.
    pub fn dispatch<P: Pod>(
        &mut self,
        pipeline: &Pipeline,
        buffers: &[&'a Buffer],
        push: &P,
        groups: [u32; 3],
    ) -> Result<()> {
        let fail = |message: String| VkError::Kernel {
            kernel: pipeline.name,
            message,
        };
        if buffers.len() != pipeline.bindings.len() {
            return Err(fail(format!(
                "expects {} buffers, got {}",
                pipeline.bindings.len(),
                buffers.len()
            )));
        }
        if std::mem::size_of::<P>() != pipeline.push_size as usize {
            return Err(fail(format!(
                "push constants are {} bytes in the shader but {} in Rust",
                pipeline.push_size,
                std::mem::size_of::<P>()
            )));
        }
        let max = self.device.info().limits.max_workgroup_count;
        if groups.iter().zip(max).any(|(&g, m)| g > m) || groups.contains(&0) {
            return Err(fail(format!(
                "workgroup count {groups:?} outside 1..={max:?}"
            )));
        }
        let (mut reads, mut writes) = (Vec::new(), Vec::new());
        for (b, &written) in buffers.iter().zip(&pipeline.writes) {
            if written { &mut writes } else { &mut reads }.push(b.raw);
        }
        self.barrier_before_command(&reads, &writes);
        let set = self
            .device
            .descriptor_set(pipeline, buffers.iter().map(|b| b.raw).collect())?;
        self.timestamp(vk::PipelineStageFlags::TOP_OF_PIPE);
        // SAFETY: the pipeline, its layout and the buffers are alive for the recorder's
        // lifetime; binding count and push-constant size were checked above.
        unsafe {
            let raw = &self.device.raw;
            raw.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline.raw);
            raw.cmd_bind_descriptor_sets(
                self.cmd,
                vk::PipelineBindPoint::COMPUTE,
                pipeline.layout,
                0,
                &[set],
                &[],
            );
            if pipeline.push_size > 0 {
                raw.cmd_push_constants(
                    self.cmd,
                    pipeline.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    bytemuck::bytes_of(push),
                );
            }
            raw.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]);
        }
        self.timestamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE);
        self.labels.push(pipeline.name);
        Ok(())
    }

    /// Records a copy of `size` bytes between buffers.
    pub fn copy(
        &mut self,
        src: &'a Buffer,
        src_offset: u64,
        dst: &'a Buffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        self.copy_as("copy", src, src_offset, dst, dst_offset, size)
    }

    /// [`copy`](Self::copy), timed under `label`.
    pub fn copy_as(
        &mut self,
        label: &'static str,
        src: &'a Buffer,
        src_offset: u64,
        dst: &'a Buffer,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        self.copy_regions(label, src, dst, &[(src_offset, dst_offset)], size)
    }

    /// Copies `size` bytes from each source offset to its destination offset in one command;
    /// the source ranges must not overlap the destination ranges.
    pub fn copy_regions(
        &mut self,
        label: &'static str,
        src: &'a Buffer,
        dst: &'a Buffer,
        offsets: &[(u64, u64)],
        size: u64,
    ) -> Result<()> {
        let fits = |b: &Buffer, off: u64| off.checked_add(size).is_some_and(|e| e <= b.size());
        if let Some(bad) = offsets
            .iter()
            .find(|&&(s, d)| !fits(src, s) || !fits(dst, d))
        {
            return Err(VkError::Allocation {
                what: format!("{} -> {}", src.name(), dst.name()),
                message: format!("copy of {size} bytes at {bad:?} is out of bounds"),
            });
        }
        if offsets.is_empty() {
            return Ok(());
        }
        self.barrier_before_command(&[src.raw], &[dst.raw]);
        self.timestamp(vk::PipelineStageFlags::TOP_OF_PIPE);
        let regions: Vec<vk::BufferCopy> = offsets
            .iter()
            .map(|&(src_offset, dst_offset)| vk::BufferCopy {
                src_offset,
                dst_offset,
                size,
            })
            .collect();
        // SAFETY: both buffers are alive for the recorder's lifetime; the ranges were checked.
        unsafe {
            self.device
                .raw
                .cmd_copy_buffer(self.cmd, src.raw, dst.raw, &regions)
        };
        self.timestamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE);
        self.labels.push(label);
        Ok(())
    }

    /// Records zeroing the whole of `dst`.
    pub fn fill_zero(&mut self, dst: &'a Buffer) -> Result<()> {
        self.barrier_before_command(&[], &[dst.raw]);
        self.timestamp(vk::PipelineStageFlags::TOP_OF_PIPE);
        // SAFETY: the buffer is alive for the recorder's lifetime; WHOLE_SIZE stays within it.
        unsafe {
            self.device
                .raw
                .cmd_fill_buffer(self.cmd, dst.raw, 0, vk::WHOLE_SIZE, 0)
        };
        self.timestamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE);
        self.labels.push("fill");
        Ok(())
    }

    pub fn device(&self) -> &'a Device {
        self.device
    }

    /// Number of commands recorded so far.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Barriers recorded so far: one less than the number of groups of commands that may run
    /// together.
    pub fn barriers(&self) -> usize {
        self.barriers
    }

    /// Submits everything in one submission and waits for it to finish.
    pub fn submit(self) -> Result<Completed> {
        let raw = &self.device.raw;
        // SAFETY: the command buffer is in the recording state and owned by `self`; the fence
        // is waited on before anything it guards is touched again.
        unsafe {
            raw.end_command_buffer(self.cmd)
                .call("vkEndCommandBuffer")?;
            let fence = raw
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .call("vkCreateFence")?;
            let cmds = [self.cmd];
            let submit = vk::SubmitInfo::default().command_buffers(&cmds);
            let start = Instant::now();
            let submitted = {
                let queue = self.device.queue();
                raw.queue_submit(*queue, &[submit], fence)
                    .call("vkQueueSubmit")
            };
            let waited = submitted.and_then(|_| {
                raw.wait_for_fences(&[fence], true, u64::MAX)
                    .call("vkWaitForFences")
            });
            let wall = start.elapsed();
            raw.destroy_fence(fence, None);
            waited?;
            Ok(Completed {
                wall,
                kernels: self.read_timestamps()?,
                groups: self
                    .labels
                    .iter()
                    .copied()
                    .zip(self.groups.iter().copied())
                    .collect(),
            })
        }
    }

    fn read_timestamps(&self) -> Result<Vec<KernelTime>> {
        let (Some(pool), Some(period)) =
            (self.queries, self.device.info().limits.timestamp_period_ns)
        else {
            return Ok(Vec::new());
        };
        let n = self.labels.len().min(MAX_QUERIES as usize / 2);
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut stamps = vec![0u64; n * 2];
        // SAFETY: the submission completed, so all 2n queries are available.
        unsafe {
            self.device
                .raw
                .get_query_pool_results(
                    pool,
                    0,
                    &mut stamps,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
                .call("vkGetQueryPoolResults")?;
        }
        Ok(self
            .labels
            .iter()
            .take(n)
            .enumerate()
            .map(|(i, &label)| KernelTime {
                label,
                start_ns: stamps[2 * i].saturating_sub(stamps[0]) as f64 * period as f64,
                ns: stamps[2 * i + 1].saturating_sub(stamps[2 * i]) as f64 * period as f64,
            })
            .collect())
    }
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        // SAFETY: submit() waited for completion, and an unsubmitted buffer was never queued.
        unsafe {
            if let Some(pool) = self.queries.take() {
                self.device.raw.destroy_query_pool(pool, None);
            }
            // Destroying the pool frees its command buffer.
            self.device.raw.destroy_command_pool(self.pool, None);
        }
    }
}
