//! InfiniGen on the reference (`kv::infinigen`): the partial skew columns, the partial key
//! cache, and the speculation that picks the tokens a decode step attends to in each layer
//! from `dense_layers` on. With a pool capacity, the sequence evicts its least fetched tokens
//! as the device's pool does; K/V stay at their positions here, and attention reads the
//! positions the entries hold.

use std::any::Any;
use std::ops::Range;

use super::{attend, CpuPolicy, LayerValues};
use crate::matmul::matmul;
use crate::ops;
use hearth_model::kv::infinigen::evict::{SlotMap, SINKS};
use hearth_model::kv::infinigen::{select, IgParams, IgStats, Skew};
use hearth_model::kv::policy::{KvPolicyKind, KvPolicyStats};
use hearth_model::ModelConfig;
use hearth_model::Result;

pub(super) struct CpuInfinigen {
    params: IgParams,
    r: usize,
    n_head_kv: usize,
    head_dim: usize,
    /// Per layer: [n_head_kv][head_dim][r].
    partial: Vec<Vec<f32>>,
    /// Per layer: [n_ctx][n_head_kv][r].
    pkeys: Vec<Vec<f32>>,
    /// The pool's entries when it has a capacity.
    slots: Option<SlotMap>,
    /// Fetches of each entry, summed over sparse layers and KV heads.
    fetches: Vec<u32>,
    stats: IgStats,
    /// The step's positions held before its tokens, in entry order, with a pool capacity.
    held: Option<Vec<u32>>,
    /// The previous layer's input, from which a decode step speculates this layer.
    prev_x: Option<Vec<f32>>,
}

impl CpuInfinigen {
    /// InfiniGen over a cache of `n_ctx` positions whose first `len` hold `k_cache` (per
    /// layer): their partial keys are computed here.
    pub(super) fn start(
        c: &ModelConfig,
        skew: &Skew,
        params: IgParams,
        k_cache: &[Vec<f32>],
        len: usize,
        n_ctx: usize,
    ) -> Self {
        let r = skew.partial_dims(params.partial_ratio);
        let partial: Vec<Vec<f32>> = (0..c.n_layer).map(|l| skew.partial(l, r)).collect();
        let slots = params.pool_capacity.map(|capacity| {
            let mut map = SlotMap::new(capacity, params.recent).keeping_first(SINKS);
            map.append(len);
            map
        });
        let mut ig = Self {
            params,
            r,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            pkeys: vec![vec![0f32; n_ctx * c.n_head_kv * r]; c.n_layer],
            partial,
            slots,
            fetches: vec![0; n_ctx],
            stats: IgStats::default(),
            held: None,
            prev_x: None,
        };
        for (l, k) in k_cache.iter().enumerate() {
            ig.appended(l, k, 0..len);
        }
        ig
    }

    /// Makes room for `n` tokens as the device's pool does and returns the positions held
    /// before them, in entry order (`None` without a capacity: every earlier position).
    fn make_room(&mut self, n: usize) -> Result<Option<Vec<u32>>> {
        let Some(map) = &mut self.slots else {
            return Ok(None);
        };
        let before = map.slots();
        map.make_room(n, &mut self.fetches)?;
        self.stats.evicted += (before - map.slots()) as u64;
        let held = map.positions().to_vec();
        map.append(n);
        Ok(Some(held))
    }

    /// Speculation for layer `at.l` at a decode step: layer l's query from the previous
    /// layer's input `prev_x` (normalized with layer l's gain), its partial columns against the
    /// partial key cache, and per KV head the positions selected (ascending).
    fn speculate(&mut self, at: &LayerValues, prev_x: &[f32]) -> Vec<Vec<u32>> {
        let (c, l, pos) = (at.config, at.l, at.pos0);
        let w = at.weights;
        let early_xn = ops::rmsnorm(prev_x, &w.attn_norm, c.n_embd, c.norm_eps);
        let (hd, r) = (c.head_dim, self.r);
        let group = c.n_head / c.n_head_kv;
        // The query rows come first in the fused projection.
        let mut q = matmul(
            &early_xn,
            &w.wqkv[..c.attn_dim() * c.n_embd],
            c.attn_dim(),
            c.n_embd,
        );
        if let Some(rope) = c.rope {
            ops::rope(
                &mut q,
                &[pos as u32],
                c.n_head,
                hd,
                rope.dims,
                rope.layout,
                at.rope_table,
            );
        }
        let partial = &self.partial[l];
        let mut qp = vec![0f32; c.n_head * r];
        for h in 0..c.n_head {
            let a = &partial[(h / group) * hd * r..][..hd * r];
            let qh = &q[h * hd..][..hd];
            for (col, o) in qp[h * r..][..r].iter_mut().enumerate() {
                *o = (0..hd).map(|i| qh[i] * a[i * r + col]).sum();
            }
        }
        // The entries held, in entry order: every earlier position, or what the pool kept.
        let held = self.held.as_deref();
        let n = held.map_or(pos, <[u32]>::len);
        let position = |t: usize| held.map_or(t, |h| h[t] as usize);
        let stride = c.n_head_kv * r;
        let pk: Vec<f32> = (0..n)
            .flat_map(|t| &self.pkeys[l][position(t) * stride..][..stride])
            .copied()
            .collect();
        let scores = select::speculate(
            &qp,
            &pk,
            c.n_head,
            c.n_head_kv,
            r,
            c.attn_scale,
            c.attn_softcap,
        );
        let budget = self.params.budget_tokens(n);
        let (alpha, recent) = (self.params.alpha, self.params.recent);
        let k = select::fetch_count(&scores, n, c.n_head, alpha, budget, recent);
        let is_recent = |t: usize| position(t) + recent >= pos;
        (0..c.n_head_kv)
            .map(|g| {
                let sel = select::select_among(&scores, n, c.n_head, c.n_head_kv, g, k, is_recent);
                self.stats.record(sel.len(), n);
                for &t in &sel {
                    self.fetches[t as usize] += 1;
                }
                sel.into_iter()
                    .map(|t| position(t as usize) as u32)
                    .collect()
            })
            .collect()
    }
}

impl CpuPolicy for CpuInfinigen {
    fn stats(&self) -> Option<KvPolicyStats> {
        Some(KvPolicyStats {
            policy: KvPolicyKind::Infinigen,
            tokens: self.stats,
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn begin_step(&mut self, tokens: usize) -> Result<()> {
        self.prev_x = None;
        self.held = self.make_room(tokens)?;
        Ok(())
    }

    /// Writes the partial keys of `positions` (their K after RoPE times the partial skew
    /// columns).
    fn appended(&mut self, l: usize, k_cache: &[f32], positions: Range<usize>) {
        let (hd, n_kv, r) = (self.head_dim, self.n_head_kv, self.r);
        let (partial, pkeys) = (&self.partial[l], &mut self.pkeys[l]);
        for p in positions {
            for g in 0..n_kv {
                let k = &k_cache[(p * n_kv + g) * hd..][..hd];
                let a = &partial[g * hd * r..][..hd * r];
                let out = &mut pkeys[(p * n_kv + g) * r..][..r];
                for (col, o) in out.iter_mut().enumerate() {
                    *o = (0..hd).map(|i| k[i] * a[i * r + col]).sum();
                }
            }
        }
    }

    fn attention(&mut self, at: &LayerValues) -> Vec<f32> {
        let n_kv = at.config.n_head_kv;
        // A local layer reads its window, densely.
        let sparse =
            at.decode() && at.l >= self.params.dense_layers && at.config.window(at.l).is_none();
        // Entries held before the step's tokens.
        let entries = self.held.as_ref().map_or(at.pos0, Vec::len);
        let prev_x = self.prev_x.take();
        let history = match &prev_x {
            _ if sparse && self.params.fetches_all(entries) => {
                for _ in 0..n_kv {
                    self.stats.record(entries, entries);
                }
                self.held.as_ref().map(|h| vec![h.clone(); n_kv])
            }
            Some(prev) if sparse => Some(self.speculate(at, prev)),
            _ => self.held.as_ref().map(|h| vec![h.clone(); n_kv]),
        };
        // This layer's input is the next layer's to speculate from.
        self.prev_x = Some(at.x.to_vec());
        attend(at, history.as_deref(), |_, _, _| {})
    }

    fn truncate(&mut self, old: usize, len: usize) -> usize {
        let Some(map) = &mut self.slots else {
            return old.min(len);
        };
        let entries = map.slots();
        let kept = map.truncate(len);
        self.fetches[kept..entries].fill(0);
        map.next_position()
    }
}
