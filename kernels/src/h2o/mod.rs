//! H2O, the heavy-hitter baseline, on the device (`kv::h2o` is the CPU reference). A decode
//! step attends over each row's kept positions with InfiniGen's [`KvGather`] and
//! [`AttnSparse`]; then [`H2oUpdate`] adds that attention to every position's mass, appends
//! the new entry and evicts down to the budget. A step that attended densely (a prompt) gets
//! its per-head softmax statistics from [`H2oLse`] and its masses from [`H2oMass`]; the host
//! evicts after it.
//!
//! [`KvGather`]: super::infinigen::KvGather
//! [`AttnSparse`]: super::infinigen::AttnSparse

use bytemuck::{Pod, Zeroable};
use hearth_shaders::{Kernel, H2O_UPDATE};

mod dense;

pub use self::dense::{DenseRun, H2oLse, H2oMass};

use super::infinigen::{IgBatch, IgShape, QueryAt};
use super::{check_sizes, head_workgroup_size, shaped_kind, Pipe, BROADCAST_LANES};
use crate::vk::{Buffer, Device, DeviceKind, Recorder, Result, VkError};

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
    pipe: Pipe,
    head_dim: u32,
    group: u32,
    /// The CPU-device shape (Q_REGS in the shaders).
    q_regs: bool,
}

impl H2oKernel {
    fn new(device: &Device, kernel: Kernel, head_dim: u32, group: u32) -> Result<Self> {
        // One workgroup per head or position block: on CPU devices a single subgroup, so
        // its barriers are cheap. There h2o_lse and h2o_mass keep the queries in registers
        // (Q_REGS), both handing loads round a subgroup of at most BROADCAST_LANES.
        let kind = shaped_kind(device.info());
        let wg = head_workgroup_size(device.info(), kind);
        let q_regs = kind == DeviceKind::Cpu && (1..=BROADCAST_LANES).contains(&wg);
        Ok(Self {
            pipe: Pipe::specialized(device, kernel, &[wg, head_dim, group, q_regs as u32])?,
            head_dim,
            group,
            q_regs,
        })
    }

    /// Workgroups along the tokens of a run for h2o_lse: one per token, or on CPU devices one
    /// per subgroup of tokens.
    fn token_groups(&self, tokens: u32) -> u32 {
        match self.q_regs {
            true => tokens.div_ceil(self.pipe.workgroup_size()),
            false => tokens,
        }
    }

    /// Checks that `s` is the shape the kernel was built for and that q holds `tokens` rows
    /// with the query heads and then the key heads.
    fn check(&self, s: IgShape, q: QueryAt, tokens: u32) -> Result<()> {
        let name = self.pipe.name;
        if s.head_dim != self.head_dim || s.n_head != s.n_head_kv * self.group {
            return Err(VkError::Kernel {
                kernel: name,
                message: format!(
                    "built for head_dim {} and {} query heads per KV head, called with {} and {}/{}",
                    self.head_dim, self.group, s.head_dim, s.n_head, s.n_head_kv
                ),
            });
        }
        q.check_width(name, (s.n_head + s.n_head_kv) * s.head_dim, tokens)
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
        let name = k.pipe.name;
        let tokens = batch.steps.len() as u32;
        k.check(s, q, tokens)?;
        state.check(name, s, batch.rows())?;
        batch.check(name)?;
        check_sizes(name, &[("k_scratch", k_scratch, s.scratch_bytes(tokens))])?;
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
            &k.pipe,
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

#[cfg(test)]
mod tests;
