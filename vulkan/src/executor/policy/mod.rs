//! KV policies in the Vulkan executor: which cached positions each layer's attention reads
//! (see `kv::policy`). The executor holds one [`KvPolicy`] and asks it, at fixed points of a
//! step, to plan the step, record a layer's attention (and any work for a later layer that
//! runs beside this layer's kernels), and do its bookkeeping once the step ran; forks,
//! truncation and its figures go through it too. [`Dense`] reads every position;
//! [`VkInfinigen`] and [`VkH2o`] attend sparsely in decode steps.

mod dense;
mod h2o;
mod infinigen;

use std::any::Any;
use std::sync::Arc;

pub use self::infinigen::FETCH_KERNELS;

pub(super) use self::dense::{record_dense_attention, Dense};
pub(super) use self::h2o::VkH2o;
use self::infinigen::VkInfinigen;
use super::kernels::Kernels;
use super::plan::{Run, StepPlan};
use super::{DeviceLayer, Scratch, SeqStep};
use hearth_kernels::infinigen::IgToken;
use hearth_kernels::kv::policy::{KvPolicyChoice, KvPolicyStats};
use hearth_kernels::kv::{KvCache, KvLayer};
use hearth_kernels::vk::{Buffer, Device, Recorder};
use hearth_kernels::{AttnShape, RopeSpec, Scores, StepToken};
use hearth_model::ModelConfig;
use hearth_model::Result;

/// A KV policy as the executor runs it. Rows are the cache's rows; the single-sequence
/// `Backend` runs row 0 in chunks (`begin_chunk`, `end_chunk`).
pub(super) trait KvPolicy: Send {
    /// What the policy read so far; `None` for dense attention.
    fn stats(&self) -> Option<KvPolicyStats>;

    /// The policy itself, for inspection by its concrete type.
    fn as_any(&self) -> &dyn Any;

    /// Tokens `row` has evicted: how far its positions run ahead of its entries.
    fn evicted(&self, _row: usize) -> usize {
        0
    }

    /// Row `dst` now shares the first `len` positions of row `src`.
    fn fork(&mut self, _src: usize, _dst: usize, _len: usize) {}

    /// Forgets row 0's tokens from position `len` on, of the `entries` it holds; returns the
    /// entries the row keeps.
    fn truncate(&mut self, _entries: usize, len: usize) -> usize {
        len
    }

    /// Before row 0 appends a chunk of `tokens`; `more`: more chunks of the same call follow.
    fn begin_chunk(&mut self, _kv: &mut KvCache, _tokens: usize, _more: bool) -> Result<()> {
        Ok(())
    }

    /// After row 0's chunk, which ran (`ran`) or failed.
    fn end_chunk(&mut self, _ran: bool) -> Result<()> {
        Ok(())
    }

    /// Before a step appends to the rows of `seqs`: refuses what the policy cannot run and
    /// brings its state in line with rows changed since their last step.
    fn admit(&mut self, _kv: &KvCache, _seqs: &[SeqStep]) -> Result<()> {
        Ok(())
    }

    /// Plans the step (its tokens appended) before it is recorded.
    fn plan(&mut self, _step: &StepView) -> Result<()> {
        Ok(())
    }

    /// Commands at the start of the step, before the embedding.
    fn record_start<'a>(&'a self, _rec: &mut Recorder<'a>) -> Result<()> {
        Ok(())
    }

    /// Whether layer `l`'s decode attention may store the step's K/V itself (the fused
    /// kernel), rather than after a RoPE-and-append of its own.
    fn fuses_append(&self, _l: usize) -> bool {
        true
    }

    /// Work for a later layer that the executor records between layer `at.l`'s kernels.
    fn beside<'a>(
        &'a self,
        _rec: &mut Recorder<'a>,
        _at: &RecordingLayer<'a>,
    ) -> Result<Beside<'a>> {
        Ok(Beside::none())
    }

    /// Layer `at.l`'s attention for the step's tokens, into the scratch's `att`; their
    /// queries and K/V after RoPE are in `qkv` and the cache.
    fn attention<'a>(&'a self, rec: &mut Recorder<'a>, at: &RecordingLayer<'a>) -> Result<()>;

    /// After the step ran.
    fn end_step(&mut self, _step: &StepView) -> Result<()> {
        Ok(())
    }
}

/// Starts the policy `choice` over the cache `kv`, whose rows may already hold tokens.
pub(super) fn start(
    device: &Arc<Device>,
    config: &ModelConfig,
    kv: &KvCache,
    chunk: usize,
    choice: KvPolicyChoice,
) -> Result<Box<dyn KvPolicy>> {
    Ok(match choice {
        KvPolicyChoice::Dense => Box::new(Dense),
        KvPolicyChoice::Infinigen { skew, params } => {
            Box::new(VkInfinigen::start(device, config, kv, skew, params)?)
        }
        KvPolicyChoice::H2o(params) => Box::new(VkH2o::start(device, config, kv, chunk, params)?),
    })
}

/// A step's tokens as a policy plans and settles it.
pub(super) struct StepView<'s> {
    pub runs: &'s [Run],
    pub seqs: &'s [SeqStep<'s>],
    pub steps: &'s [StepToken],
    pub n_layer: usize,
}

impl StepView<'_> {
    /// The tokens of a decode step that a sparse policy may take: every sequence brings one
    /// token (token t is run t), has history and reads no beam table. Empty otherwise.
    pub fn sparse_decodes(&self) -> Vec<IgToken> {
        let decodes = self
            .runs
            .iter()
            .all(|r| r.tokens == 1 && r.len > 0 && self.seqs[r.seq].beam.is_none());
        if !decodes {
            return Vec::new();
        }
        self.runs
            .iter()
            .map(|r| IgToken {
                row: self.seqs[r.seq].row as u32,
                index: r.len as u32,
                pos: self.steps[r.t0].rope_pos,
            })
            .collect()
    }
}

/// What a policy sees of layer `l` while a step is recorded.
pub(super) struct RecordingLayer<'a> {
    /// The model's layer.
    pub l: usize,
    /// The model's layer that the executor's first holds (a split model's later part).
    pub first: usize,
    pub config: &'a ModelConfig,
    pub kernels: &'a Kernels,
    pub scratch: &'a Scratch,
    /// Every layer's weights (a policy may work ahead for the next).
    pub layers: &'a [DeviceLayer],
    pub kv: &'a KvCache,
    /// This layer's RoPE table.
    pub rope_table: &'a Buffer,
    /// Global layers' table: that of the later layers InfiniGen speculates for.
    pub global_rope_table: &'a Buffer,
    pub plan: &'a StepPlan<'a>,
    /// The decode attention stores the step's K/V itself (`KvPolicy::fuses_append`).
    pub fused: bool,
    /// A row split's share of the layer: the attention and MLP outputs replace x instead of
    /// adding to it, a partial sum for the host to add up.
    pub partial: bool,
}

impl<'a> RecordingLayer<'a> {
    pub fn kv_layer(&self) -> KvLayer<'a> {
        self.kv.layer(self.l - self.first)
    }

    /// Layer `l`'s weights.
    pub fn weights(&self) -> &'a DeviceLayer {
        &self.layers[self.l - self.first]
    }

    pub fn rope(&self) -> RopeSpec {
        rope_spec(self.config, self.l)
    }

    /// Floats per token in `qkv`.
    pub fn qkv_stride(&self) -> u32 {
        self.config.qkv_dim() as u32
    }

    /// Layer l's attention over `tokens` of the step's tokens from its token `t0`.
    pub fn attn_shape(&self, t0: usize, tokens: usize) -> AttnShape {
        let (c, l) = (self.config, self.l);
        AttnShape {
            tokens: tokens as u32,
            t0: t0 as u32,
            n_head: c.n_head as u32,
            n_head_kv: c.n_head_kv as u32,
            head_dim: c.head_dim as u32,
            scores: Scores {
                scale: c.attn_scale,
                softcap: c.attn_softcap,
                window: c.window(l).map(|w| w as u32),
            },
        }
    }
}

/// Layer `l`'s rotation (none: `rot_dim` 0).
pub(super) fn rope_spec(c: &ModelConfig, l: usize) -> RopeSpec {
    RopeSpec {
        rot_dim: c.rope_at(l).map_or(0, |r| r.dims as u32),
        layout: c
            .rope
            .map_or(hearth_model::ops::RopeLayout::Neox, |r| r.layout),
    }
}

/// Work a policy records for a later layer in pieces, each right after one of the current
/// layer's kernels that waits for its predecessor: a piece shares no buffer with that
/// kernel, so the two form one group of commands that a GPU runs together.
pub(super) trait Interleaved<'a> {
    /// Records the next piece; nothing once all are.
    fn step(&mut self, rec: &mut Recorder<'a>) -> Result<()>;
    /// Records the pieces left.
    fn finish(&mut self, rec: &mut Recorder<'a>) -> Result<()>;
}

/// A layer's [`Interleaved`] work, when its policy has any.
pub(super) struct Beside<'a>(Option<Box<dyn Interleaved<'a> + 'a>>);

impl<'a> Beside<'a> {
    pub fn none() -> Self {
        Self(None)
    }

    pub fn new(work: impl Interleaved<'a> + 'a) -> Self {
        Self(Some(Box::new(work)))
    }

    /// Records the next piece.
    pub fn step(&mut self, rec: &mut Recorder<'a>) -> Result<()> {
        match &mut self.0 {
            Some(work) => work.step(rec),
            None => Ok(()),
        }
    }

    /// Records what is left.
    pub fn finish(mut self, rec: &mut Recorder<'a>) -> Result<()> {
        match &mut self.0 {
            Some(work) => work.finish(rec),
            None => Ok(()),
        }
    }
}
