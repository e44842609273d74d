//! The kernels that add a densely attended run's attention to the H2O masses: softmax
//! statistics per query head ([`H2oLse`]), then the masses ([`H2oMass`]).

use hearth_shaders::{kv_kernels, Kernel};

use super::{H2oKernel, H2oPush, H2oState};
use crate::infinigen::{IgShape, QueryAt};
use crate::kv::{KvLayer, KvType};
use crate::vk::{Buffer, Device, Recorder, Result, VkError};
use crate::{check_sizes, StepToken};

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
        // The last entry lies within the row's block table and n_ctx.
        let last = first.pos + self.run.len() as u32 - 1;
        s.check_position(kernel, kv, first.row, last)?;
        let step_bytes = std::mem::size_of::<StepToken>() as u64;
        let steps = (self.q.token as u64 + self.run.len() as u64) * step_bytes;
        check_sizes(kernel, &[("steps", self.steps, steps)])
    }

    /// Bytes of the softmax statistics ([tokens, n_head] vec2) up to the run's last token.
    fn stats_bytes(&self, s: IgShape) -> u64 {
        (self.q.token as u64 + self.run.len() as u64) * s.n_head as u64 * 8
    }
}

/// What h2o_lse and h2o_mass share: the cache type they read, and the checks of a run.
struct DenseKernel {
    h2o: H2oKernel,
    kv_type: KvType,
}

impl DenseKernel {
    fn new(
        device: &Device,
        kernel: Kernel,
        head_dim: u32,
        group: u32,
        kv_type: KvType,
    ) -> Result<Self> {
        let h2o = H2oKernel::new(device, kernel, head_dim, group)?;
        Ok(Self { h2o, kv_type })
    }

    /// Checks `run` over `kv` against the kernel; returns its tokens.
    fn check(&self, kv: &KvLayer, run: &DenseRun, s: IgShape) -> Result<u32> {
        let name = self.h2o.pipe.name;
        let tokens = run.run.len() as u32;
        self.h2o.check(s, run.q, tokens)?;
        kv.check_type(name, self.kv_type)?;
        run.check(name, s, kv)?;
        Ok(tokens)
    }
}

/// Softmax statistics of a dense run's query heads (h2o_lse.comp).
pub struct H2oLse(DenseKernel);

impl H2oLse {
    /// For a cache of `kv_type`.
    pub fn new(device: &Device, head_dim: u32, group: u32, kv_type: KvType) -> Result<Self> {
        let kernel = kv_kernels(kv_type).h2o_lse;
        DenseKernel::new(device, kernel, head_dim, group, kv_type).map(Self)
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
        let k = &self.0.h2o;
        let tokens = self.0.check(&kv, &run, s)?;
        check_sizes(k.pipe.name, &[("stats", stats, run.stats_bytes(s))])?;
        if tokens == 0 {
            return Ok(());
        }
        rec.dispatch(
            &k.pipe,
            &[run.q.buffer, kv.k, kv.tables, run.steps, stats],
            &H2oPush::new(s, run.q, tokens, kv.max_blocks),
            [k.token_groups(tokens), s.n_head_kv, 1],
        )
    }
}

/// Adds a dense run's attention to the masses of its row (h2o_mass.comp).
pub struct H2oMass(DenseKernel);

impl H2oMass {
    /// For a cache of `kv_type`.
    pub fn new(device: &Device, head_dim: u32, group: u32, kv_type: KvType) -> Result<Self> {
        let kernel = kv_kernels(kv_type).h2o_mass;
        DenseKernel::new(device, kernel, head_dim, group, kv_type).map(Self)
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
        let k = &self.0.h2o;
        let name = k.pipe.name;
        let tokens = self.0.check(&kv, &run, s)?;
        let Some(first) = run.run.first() else {
            return Ok(());
        };
        state.check(name, s, first.row + 1)?;
        check_sizes(name, &[("stats", stats, run.stats_bytes(s))])?;
        let entries = (first.pos + tokens) as u64;
        let wg = k.pipe.workgroup_size() as u64;
        rec.dispatch(
            &k.pipe,
            &[run.q.buffer, kv.k, kv.tables, run.steps, stats, state.mass],
            &H2oPush::new(s, run.q, tokens, kv.max_blocks),
            [entries.div_ceil(wg) as u32, s.n_head_kv, 1],
        )
    }
}
