//! Attention over the paged KV cache: `RopeKv` rotates the fused projection's queries and keys
//! and appends keys and values to the cache; `AttnDecode` and `AttnPrefill` attend over it.
//!
//! All three read the projection output `qkv` [tokens, (n_head + 2 n_head_kv) * head_dim]
//! (query heads, then key heads, then value heads) and write `o` [tokens, n_head * head_dim].
//! A step's tokens may come from several sequences: `steps` holds, per token, its row in the
//! cache, its position, and its beam-table offset ([`StepToken`]).
//!
//! One file per kernel; `split` is what split decode attention adds (partials and their
//! merge), used by the sparse attention of InfiniGen and H2O too.

mod decode;
mod prefill;
mod rope_kv;
mod split;
#[cfg(test)]
mod tests;

pub use decode::AttnDecode;
pub(crate) use decode::{decode_shape, head_workgroups, heads_per_workgroup, rolled_keys};
pub use prefill::AttnPrefill;
pub use rope_kv::RopeKv;
pub(crate) use split::Split;

use bytemuck::{Pod, Zeroable};

use super::check_sizes;
use crate::kv::{KvLayer, KvType, NO_BEAM};
use crate::vk::{Buffer, Pipeline, Recorder, Result, VkError};
use hearth_model::ops::RopeLayout;

/// Where one token of a step belongs, as the kernels read it (`uvec4` in `attn_push.glsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
pub struct StepToken {
    /// The cache row (sequence slot) it is written to.
    pub row: u32,
    /// Its index in the row: where its K/V go, after the `pos` entries it attends to.
    pub pos: u32,
    /// Offset of its sequence's beam table, or `NO_BEAM`.
    pub beam: u32,
    /// Its position in the sequence, which RoPE turns it by: `pos` unless the row's pool
    /// evicted tokens (`kv::infinigen::evict`).
    pub rope_pos: u32,
}

impl StepToken {
    pub fn new(row: u32, pos: u32) -> Self {
        Self {
            row,
            pos,
            beam: NO_BEAM,
            rope_pos: pos,
        }
    }
}

/// The shape of one attention dispatch: tokens t0 .. t0 + tokens of the step.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub tokens: u32,
    pub t0: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    pub scores: Scores,
}

/// How a layer turns query-key products into the scores its softmax takes, and which
/// entries it scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scores {
    /// The factor on each product (1 / sqrt(head_dim) for most models).
    pub scale: f32,
    /// Soft-capping: scores become cap * tanh(score / cap) (Gemma 2).
    pub softcap: Option<f32>,
    /// A local layer's window: each token attends to this many most recent entries, its own
    /// included.
    pub window: Option<u32>,
}

impl Scores {
    /// Scaled by 1 / sqrt(head_dim), every entry, no cap.
    pub fn plain(head_dim: u32) -> Self {
        Self {
            scale: 1.0 / (head_dim as f32).sqrt(),
            softcap: None,
            window: None,
        }
    }

    /// The most entries a token attends to, where it has `len` before it and its own.
    pub fn span(&self, len: u32) -> u32 {
        self.window.map_or(len, |w| len.min(w))
    }
}

impl AttnShape {
    pub(super) fn q_stride(&self) -> u64 {
        (self.n_head + 2 * self.n_head_kv) as u64 * self.head_dim as u64
    }

    pub(super) fn check(
        &self,
        kernel: &'static str,
        qkv: &Buffer,
        o: &Buffer,
        steps: &Buffer,
    ) -> Result<()> {
        let fail = |message: String| Err(VkError::Kernel { kernel, message });
        if self.n_head_kv == 0 || self.n_head % self.n_head_kv != 0 {
            return fail(format!(
                "{} KV heads do not divide {} query heads",
                self.n_head_kv, self.n_head
            ));
        }
        if self.head_dim % 4 != 0 {
            return fail(format!("head_dim {} is not a multiple of 4", self.head_dim));
        }
        let end = (self.t0 + self.tokens) as u64;
        check_sizes(
            kernel,
            &[
                ("qkv", qkv, end * self.q_stride() * 4),
                ("o", o, end * (self.n_head * self.head_dim) as u64 * 4),
                ("steps", steps, end * 16),
            ],
        )
    }

    pub(super) fn push(&self, kv: &KvLayer, rope: Option<RopeSpec>) -> AttnPush {
        AttnPush {
            tokens: self.tokens,
            t0: self.t0,
            n_head: self.n_head,
            n_head_kv: self.n_head_kv,
            head_dim: self.head_dim,
            q_stride: self.q_stride() as u32,
            max_blocks: kv.max_blocks,
            scale: self.scores.scale,
            rot_dim: rope.map_or(0, |r| r.rot_dim),
            mode: match rope.map(|r| r.layout) {
                Some(RopeLayout::Gptj) => 1,
                _ => 0,
            },
            splits: 1,
            window: self.scores.window.unwrap_or(0),
            softcap: self.scores.softcap.unwrap_or(0.0),
            sinks: 0,
            k_addr: kv.k.device_address().unwrap_or(0),
            v_addr: kv.v.device_address().unwrap_or(0),
        }
    }
}

/// Push constants of rope_kv and both attention kernels (`include/attn_push.glsl`).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(super) struct AttnPush {
    pub(super) tokens: u32,
    pub(super) t0: u32,
    pub(super) n_head: u32,
    pub(super) n_head_kv: u32,
    pub(super) head_dim: u32,
    pub(super) q_stride: u32,
    pub(super) max_blocks: u32,
    pub(super) scale: f32,
    pub(super) rot_dim: u32,
    pub(super) mode: u32,
    pub(super) splits: u32,
    pub(super) window: u32,
    pub(super) softcap: f32,
    /// 1 where the kernel's sink binding holds the layer's sinks.
    pub(super) sinks: u32,
    /// The layer's K and V addresses, for the kernels that read them so (0 elsewhere).
    pub(super) k_addr: u64,
    pub(super) v_addr: u64,
}

/// How the keys and queries rotate; `rot_dim` 0 means no rotary embedding.
#[derive(Clone, Copy, Debug)]
pub struct RopeSpec {
    pub rot_dim: u32,
    pub layout: RopeLayout,
}

/// The rotary embedding a kernel applies: `table` is `cpu::ops::rope_table(n_ctx, rot_dim,
/// base)` (any buffer when rot_dim is 0), and positions must lie within it.
#[derive(Clone, Copy)]
pub struct RopeTable<'a> {
    pub table: &'a Buffer,
    pub spec: RopeSpec,
}

/// The buffers of one attention dispatch: the step's projections `qkv`, the layer's cache,
/// the step's tokens (`steps`, [tokens] [`StepToken`]), the output `o`, and the layer's
/// sinks where it has them ([n_head] f32: a logit per query head that joins its softmax's
/// denominator and adds no value, GPT-OSS).
#[derive(Clone, Copy)]
pub struct AttnIo<'a> {
    pub qkv: &'a Buffer,
    pub kv: KvLayer<'a>,
    pub steps: &'a Buffer,
    pub o: &'a Buffer,
    pub sinks: Option<&'a Buffer>,
}

impl<'a> AttnIo<'a> {
    /// What fills the sink binding: the sinks, or without them any buffer (unread).
    pub(super) fn sink_binding(&self) -> &'a Buffer {
        self.sinks.unwrap_or(self.qkv)
    }
}

/// How one attention kernel dispatches: its pipeline and the head_dim and KV type it was
/// built for, `extra` buffers bound after the common ones (binding 7 on; the sink binding
/// among them, which `io.sinks` marks read), the workgroups, and `splits`, the push constant
/// of split decode attention (1 elsewhere).
pub(super) struct AttnDispatch<'p, 'a> {
    pub(super) pipeline: &'p Pipeline,
    pub(super) built_head_dim: u32,
    pub(super) kv_type: KvType,
    pub(super) extra: &'p [&'a Buffer],
    pub(super) groups: [u32; 3],
    pub(super) splits: u32,
}

/// Checks the shape and records one attention dispatch.
pub(super) fn record_attention<'a>(
    rec: &mut Recorder<'a>,
    dispatch: AttnDispatch<'_, 'a>,
    io: AttnIo<'a>,
    s: AttnShape,
    rope: Option<RopeSpec>,
) -> Result<()> {
    let AttnDispatch {
        pipeline,
        built_head_dim,
        kv_type,
        extra,
        groups,
        splits,
    } = dispatch;
    let AttnIo {
        qkv,
        kv,
        steps,
        o,
        sinks,
    } = io;
    if built_head_dim != s.head_dim {
        return Err(VkError::Kernel {
            kernel: pipeline.name,
            message: format!(
                "built for head_dim {built_head_dim}, called with {}",
                s.head_dim
            ),
        });
    }
    s.check(pipeline.name, qkv, o, steps)?;
    if let Some(sinks) = sinks {
        check_sizes(pipeline.name, &[("sinks", sinks, s.n_head as u64 * 4)])?;
    }
    kv.check_type(pipeline.name, kv_type)?;
    rope_kv::check_group(pipeline.name, s, kv_type)?;
    if s.tokens == 0 {
        return Ok(());
    }
    let push = AttnPush {
        splits,
        sinks: sinks.is_some() as u32,
        ..s.push(&kv, rope)
    };
    let mut buffers = vec![qkv, o, kv.k, kv.v, kv.tables, kv.beams, steps];
    buffers.extend_from_slice(extra);
    rec.dispatch(pipeline, &buffers, &push, groups)
}
