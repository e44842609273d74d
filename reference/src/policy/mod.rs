//! KV policies on the CPU reference: which cached positions each layer's attention reads
//! (see `kv::policy`). The forward pass appends each layer's K/V and hands the layer to its
//! [`CpuPolicy`], which attends over every position ([`Dense`]), the ones InfiniGen
//! speculates ([`CpuInfinigen`]) or the ones H2O keeps ([`CpuH2o`]).

mod dense;
mod h2o;
mod infinigen;

use std::any::Any;
use std::ops::Range;

pub(super) use self::dense::Dense;
pub(super) use self::h2o::CpuH2o;
use self::infinigen::CpuInfinigen;
use super::matmul::dot;
use super::ops;
use super::CpuLayer;
use hearth_model::kv::policy::{KvPolicyChoice, KvPolicyStats};
use hearth_model::ModelConfig;
use hearth_model::Result;

/// A KV policy as the CPU reference runs it, for its single sequence.
pub(super) trait CpuPolicy: Send {
    /// What the policy read so far; `None` for dense attention.
    fn stats(&self) -> Option<KvPolicyStats>;

    /// The policy itself, for inspection by its concrete type.
    fn as_any(&self) -> &dyn Any;

    /// Before a step of `tokens` tokens.
    fn begin_step(&mut self, _tokens: usize) -> Result<()> {
        Ok(())
    }

    /// Layer `l`'s K for `positions` was written to `k_cache`.
    fn appended(&mut self, _l: usize, _k_cache: &[f32], _positions: Range<usize>) {}

    /// Layer `at.l`'s attention for the step's tokens: [tokens, n_head * head_dim].
    fn attention(&mut self, at: &LayerValues) -> Vec<f32>;

    /// Forgets positions from `len` on, of the `old` the sequence had; returns its new
    /// length.
    fn truncate(&mut self, old: usize, len: usize) -> usize {
        old.min(len)
    }
}

/// Starts the policy `choice` over a cache of `n_ctx` positions whose first `len` hold
/// `k_cache` (per layer).
pub(super) fn start(
    c: &ModelConfig,
    choice: KvPolicyChoice,
    k_cache: &[Vec<f32>],
    len: usize,
    n_ctx: usize,
) -> Box<dyn CpuPolicy> {
    match choice {
        KvPolicyChoice::Dense => Box::new(Dense),
        KvPolicyChoice::Infinigen { skew, params } => {
            Box::new(CpuInfinigen::start(c, skew, params, k_cache, len, n_ctx))
        }
        KvPolicyChoice::H2o(params) => Box::new(CpuH2o::start(c, params, len, n_ctx)),
    }
}

/// What a policy sees of layer `l` in a step of `n` tokens from position `pos0`.
pub(super) struct LayerValues<'a> {
    pub config: &'a ModelConfig,
    pub l: usize,
    pub weights: &'a CpuLayer,
    /// [n, n_embd]: the layer's input, the residual stream.
    pub x: &'a [f32],
    /// [n, qkv_dim]: the step's queries, keys and values, after RoPE.
    pub qkv: &'a [f32],
    /// Layer l's cache, [n_ctx, n_head_kv * head_dim], the step's K/V included.
    pub k_cache: &'a [f32],
    pub v_cache: &'a [f32],
    pub pos0: usize,
    pub n: usize,
    pub rope_table: &'a [[f32; 2]],
}

impl LayerValues<'_> {
    /// A decode step: one token after earlier ones.
    pub fn decode(&self) -> bool {
        self.n == 1 && self.pos0 > 0
    }
}

/// Attention of the step's tokens: each query head over, besides its own token and the
/// step's earlier ones, the positions `history` gives its KV head (ascending), or every
/// earlier position without one. `probs` sees each query head's softmax probabilities with
/// their positions and KV head.
pub(super) fn attend(
    at: &LayerValues,
    history: Option<&[Vec<u32>]>,
    mut probs: impl FnMut(usize, &[usize], &[f32]),
) -> Vec<f32> {
    let (c, pos0) = (at.config, at.pos0);
    let hd = c.head_dim;
    let kv_dim = c.n_head_kv * hd;
    let mut att = vec![0f32; at.n * c.attn_dim()]; // (n, n_head * head_dim)
    let group = c.n_head / c.n_head_kv;
    let window = c.window(at.l);
    for t in 0..at.n {
        let n_kv = pos0 + t + 1; // causal: positions 0..=pos0 + t
                                 // A local layer sees the window's most recent positions only.
        let first = window.map_or(0, |w| n_kv.saturating_sub(w));
        for h in 0..c.n_head {
            let q = &at.qkv[t * c.qkv_dim() + h * hd..][..hd];
            let kvh = h / group;
            let positions: Vec<usize> = match history {
                Some(hist) => hist[kvh]
                    .iter()
                    .map(|&p| p as usize)
                    .chain(pos0..=pos0 + t)
                    .filter(|&p| p >= first)
                    .collect(),
                None => (first..n_kv).collect(),
            };
            let mut scores: Vec<f32> = positions
                .iter()
                .map(|&p| {
                    let k = &at.k_cache[p * kv_dim + kvh * hd..][..hd];
                    dot(q, k) * c.attn_scale
                })
                .collect();
            if let Some(cap) = c.attn_softcap {
                ops::softcap(&mut scores, cap);
            }
            let sink = at.weights.attn_sinks.as_ref().map(|s| s[h]);
            ops::softmax_with_sink(&mut scores, sink);
            probs(kvh, &positions, &scores);
            let out = &mut att[t * c.attn_dim() + h * hd..][..hd];
            for (&p, &s) in positions.iter().zip(&scores) {
                let v = &at.v_cache[p * kv_dim + kvh * hd..][..hd];
                for (o, &vv) in out.iter_mut().zip(v) {
                    *o += s * vv;
                }
            }
        }
    }
    att
}
