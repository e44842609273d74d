//! H2O, the heavy-hitter baseline, on the device (`kv::h2o` is the CPU reference). A decode
//! step attends over each row's kept positions with InfiniGen's [`KvGather`] and
//! [`AttnSparse`]; then [`H2oUpdate`] adds that attention to every position's mass, appends
//! the new entry and evicts down to the budget. A step that attended densely (a prompt) gets
//! its per-head softmax statistics from [`H2oLse`] and its masses from [`H2oMass`]; the host
//! evicts after it.
//!
//! [`KvGather`]: super::infinigen::KvGather
//! [`AttnSparse`]: super::infinigen::AttnSparse

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{Kernel, H2O_LSE, H2O_MASS, H2O_UPDATE};

use super::infinigen::{IgBatch, IgShape, QueryAt};
use super::{check_sizes, head_workgroup_size, StepToken};
use crate::kv::KvLayer;
use crate::vk::{Buffer, Device, Pipeline, Recorder, Result, VkError};

/// Push constants of the H2O kernels (`Push` in include/h2o.glsl).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct H2oPush {
    t0: u32,
    tokens: u32,
    q_stride: u32,
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    n_ctx: u32,
    max_blocks: u32,
    cap: u32,
    scale: f32,
}

impl H2oPush {
    fn new(s: IgShape, q: QueryAt, tokens: u32, max_blocks: u32) -> Self {
        Self {
            t0: q.token,
            tokens,
            q_stride: q.stride,
            n_head: s.n_head,
            n_head_kv: s.n_head_kv,
            head_dim: s.head_dim,
            n_ctx: s.n_ctx,
            max_blocks,
            cap: s.cap,
            scale: 1.0 / (s.head_dim as f32).sqrt(),
        }
    }
}

/// One layer's H2O state on the device, for `rows` cache rows (see include/h2o.glsl):
/// `kept` [rows, n_kv, cap] u32, `kept_count` [rows, n_kv] u32, `mass` [rows, n_kv, n_ctx] f32.
#[derive(Clone, Copy)]
pub struct H2oState<'a> {
    pub kept: &'a Buffer,
    pub kept_count: &'a Buffer,
    pub mass: &'a Buffer,
}

impl H2oState<'_> {
    fn check(&self, kernel: &'static str, s: IgShape, rows: u32) -> Result<()> {
        let lists = rows as u64 * s.n_head_kv as u64;
        check_sizes(
            kernel,
            &[
                ("kept", self.kept, lists * s.cap as u64 * 4),
                ("kept_count", self.kept_count, lists * 4),
                ("mass", self.mass, lists * s.n_ctx as u64 * 4),
            ],
        )
    }
}

/// The three H2O kernels share their specialization (workgroup, head_dim, group) and checks.
struct H2oKernel {
    pipeline: Arc<Pipeline>,
    kernel: Kernel,
    head_dim: u32,
    group: u32,
}

impl H2oKernel {
    fn new(device: &Device, kernel: Kernel, head_dim: u32, group: u32) -> Result<Self> {
        // One workgroup per head or position block: on CPU devices a single subgroup, so
        // its barriers are cheap.
        let wg = head_workgroup_size(device.info(), device.info().kind);
        Ok(Self {
            pipeline: device.pipeline(kernel, &[wg, head_dim, group])?,
            kernel,
            head_dim,
            group,
        })
    }

    /// Checks that `s` is the shape the kernel was built for and that q holds `tokens` rows
    /// with the query heads and then the key heads.
    fn check(&self, s: IgShape, q: QueryAt, tokens: u32) -> Result<()> {
        let name = self.kernel.name;
        let fail = |message: String| {
            Err(VkError::Kernel {
                kernel: name,
                message,
            })
        };
        if s.head_dim != self.head_dim || s.n_head != s.n_head_kv * self.group {
            return fail(format!(
                "built for head_dim {} and {} query heads per KV head, called with {} and {}/{}",
                self.head_dim, self.group, s.head_dim, s.n_head, s.n_head_kv
            ));
        }
        let heads = (s.n_head + s.n_head_kv) * s.head_dim;
        if q.stride < heads || q.stride % 4 != 0 {
            return fail(format!(
                "query stride {} must be a multiple of 4 and hold {heads} floats",
                q.stride
            ));
        }
        let end = (q.token + tokens.max(1) - 1) as u64 * q.stride as u64 + heads as u64;
        check_sizes(name, &[("q", q.buffer, end * 4)])
    }
}

/// After a decode step's sparse attention: masses, append and eviction (h2o_update.comp).
pub struct H2oUpdate(H2oKernel);

impl H2oUpdate {
    /// For a model whose KV heads are each shared by `group` query heads.
    pub fn new(device: &Device, head_dim: u32, group: u32) -> Result<Self> {
        Ok(Self(H2oKernel::new(device, H2O_UPDATE, head_dim, group)?))
    }

    /// For token t of `batch` (its query and key, post-RoPE, in row q.token + t of `q`) and
    /// each KV head g: the positions its row keeps, gathered into `k_scratch` [tokens, n_kv,
    /// cap, head_dim] in kept order, and its own entry gain its attention; the entry joins
    /// the kept positions; the lightest old ones leave until at most its budget remain.
    pub fn record<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        q: QueryAt<'a>,
        k_scratch: &'a Buffer,
        state: H2oState<'a>,
        s: IgShape,
        batch: IgBatch<'a>,
    ) -> Result<()> {
        let k = &self.0;
        let name = k.kernel.name;
        let tokens = batch.steps.len() as u32;
        k.check(s, q, tokens)?;
        let rows = batch.steps.iter().map(|st| st.row + 1).max().unwrap_or(0);
        state.check(name, s, rows)?;
        check_sizes(
            name,
            &[
                ("k_scratch", k_scratch, s.scratch_bytes(tokens)),
                (
                    "steps",
                    batch.buffer,
                    std::mem::size_of_val(batch.steps) as u64,
                ),
            ],
        )?;
        // The new entry takes a slot before the lightest leaves.
        if let Some(st) = batch
            .steps
            .iter()
            .find(|st| st.budget >= s.cap || st.index >= s.n_ctx || st.budget == 0)
        {
            return Err(VkError::Kernel {
                kernel: name,
                message: format!(
                    "entry {} with budget {} does not fit {} slots and {} positions",
                    st.index, st.budget, s.cap, s.n_ctx
                ),
            });
        }
        if tokens == 0 {
            return Ok(());
        }
        rec.dispatch(
            &k.pipeline,
            &[
                q.buffer,
                k_scratch,
                state.kept,
                state.kept_count,
                state.mass,
                batch.buffer,
            ],
            &H2oPush::new(s, q, tokens, 0),
            [s.n_head_kv, tokens, 1],
        )
    }
}

/// A run of tokens of one row that attended densely, entries `run[0].pos ..` in order:
/// tokens q.token .. of the step, whose `StepToken`s `steps` holds at the same rows.
#[derive(Clone, Copy)]
pub struct DenseRun<'a> {
    pub q: QueryAt<'a>,
    pub steps: &'a Buffer,
    pub run: &'a [StepToken],
}

impl DenseRun<'_> {
    fn check(&self, kernel: &'static str, s: IgShape, kv: &KvLayer) -> Result<()> {
        let fail = |message: String| Err(VkError::Kernel { kernel, message });
        let Some(first) = self.run.first() else {
            return Ok(());
        };
        let consecutive = self
            .run
            .iter()
            .enumerate()
            .all(|(i, st)| st.row == first.row && st.pos == first.pos + i as u32);
        if !consecutive {
            return fail("a run's tokens must be consecutive entries of one row".into());
        }
        let end = first.pos as u64 + self.run.len() as u64;
        let held = (kv.max_blocks as u64 * crate::kv::BLOCK_TOKENS as u64).min(s.n_ctx as u64);
        if end > held {
            return fail(format!(
                "entries up to {end} are past the {held} a row holds"
            ));
        }
        let step_bytes = std::mem::size_of::<StepToken>() as u64;
        check_sizes(
            kernel,
            &[
                (
                    "steps",
                    self.steps,
                    (self.q.token as u64 + self.run.len() as u64) * step_bytes,
                ),
                (
                    "tables",
                    kv.tables,
                    (first.row as u64 + 1) * kv.max_blocks as u64 * 4,
                ),
            ],
        )
    }
}

/// Softmax statistics of a dense run's query heads (h2o_lse.comp).
pub struct H2oLse(H2oKernel);

impl H2oLse {
    pub fn new(device: &Device, head_dim: u32, group: u32) -> Result<Self> {
        Ok(Self(H2oKernel::new(device, H2O_LSE, head_dim, group)?))
    }

    /// stats[q.token + i][h] = (max, sum of exp(score - max)) over entries 0 ..= the i-th
    /// token's own, for every query head h; `stats` is [tokens, n_head] vec2.
    pub fn record<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        kv: KvLayer<'a>,
        run: DenseRun<'a>,
        stats: &'a Buffer,
        s: IgShape,
    ) -> Result<()> {
        let k = &self.0;
        let name = k.kernel.name;
        let tokens = run.run.len() as u32;
        k.check(s, run.q, tokens)?;
        run.check(name, s, &kv)?;
        let end = (run.q.token + tokens) as u64 * s.n_head as u64 * 8;
        check_sizes(name, &[("stats", stats, end)])?;
        if tokens == 0 {
            return Ok(());
        }
        rec.dispatch(
            &k.pipeline,
            &[run.q.buffer, kv.k, kv.tables, run.steps, stats],
            &H2oPush::new(s, run.q, tokens, kv.max_blocks),
            [tokens, s.n_head_kv, 1],
        )
    }
}

/// Adds a dense run's attention to the masses of its row (h2o_mass.comp).
pub struct H2oMass(H2oKernel);

impl H2oMass {
    pub fn new(device: &Device, head_dim: u32, group: u32) -> Result<Self> {
        Ok(Self(H2oKernel::new(device, H2O_MASS, head_dim, group)?))
    }

    /// mass[row][g][j] += the probabilities the run's query heads of KV head g gave entry j,
    /// from `stats` as [`H2oLse`] left them.
    pub fn record<'a>(
        &'a self,
        rec: &mut Recorder<'a>,
        kv: KvLayer<'a>,
        run: DenseRun<'a>,
        stats: &'a Buffer,
        state: H2oState<'a>,
        s: IgShape,
    ) -> Result<()> {
        let k = &self.0;
        let name = k.kernel.name;
        let tokens = run.run.len() as u32;
        k.check(s, run.q, tokens)?;
        run.check(name, s, &kv)?;
        let Some(first) = run.run.first() else {
            return Ok(());
        };
        state.check(name, s, first.row + 1)?;
        let end = (run.q.token + tokens) as u64 * s.n_head as u64 * 8;
        check_sizes(name, &[("stats", stats, end)])?;
        let entries = (first.pos + tokens) as u64;
        let wg = k.pipeline.workgroup_size() as u64;
        rec.dispatch(
            &k.pipeline,
            &[run.q.buffer, kv.k, kv.tables, run.steps, stats, state.mass],
            &H2oPush::new(s, run.q, tokens, kv.max_blocks),
            [entries.div_ceil(wg) as u32, s.n_head_kv, 1],
        )
    }
}
