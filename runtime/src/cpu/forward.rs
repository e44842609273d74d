//! The reference forward pass: plain f32 on the CPU, written to be read top to bottom.
//! It is the oracle the Vulkan executor is tested against, so it favours clarity over speed;
//! the matrix products are only split across cores and over several accumulators so that a
//! few thousand tokens of perplexity take minutes, not hours.

use hearth_models::{GgufFile, ResolvedModel};

use super::ops;
use crate::error::{Error, Result};
use crate::kv::h2o::H2o;
use crate::kv::infinigen::evict::{SlotMap, SINKS};
use crate::kv::infinigen::{self, Calibration, IgParams, IgStats, Skew};
use crate::kv::policy::{KvPolicyChoice, KvPolicyKind, KvPolicyStats};
use crate::model::{Backend, Layer, Logits, ModelConfig, ProgressFn, WeightReader};

/// One block's weights as f32: the exact values of the packed matrices the device holds.
type CpuLayer = Layer<Vec<f32>, Vec<f32>>;

pub struct CpuModel {
    config: ModelConfig,
    /// [n_vocab, n_embd]
    token_embd: Vec<f32>,
    /// [n_embd]
    output_norm: Vec<f32>,
    /// [n_vocab, n_embd]; `None` when tied to `token_embd`.
    output: Option<Vec<f32>>,
    layers: Vec<CpuLayer>,
    /// Per layer: [n_ctx, n_head_kv * head_dim].
    k_cache: Vec<Vec<f32>>,
    v_cache: Vec<Vec<f32>>,
    /// [n_ctx, rot_dim / 2] of (cos, sin).
    rope_table: Vec<[f32; 2]>,
    n_ctx: usize,
    len: usize,
    /// Which positions decode steps attend to.
    sparsity: Sparsity,
    /// Post-RoPE queries per layer, collected while calibrating.
    captured: Option<Vec<Vec<f32>>>,
}

/// What attention reads: every cached position, the ones InfiniGen speculates (decode steps),
/// or the ones H2O keeps. The two sparse policies exclude each other: each is the other's
/// comparison at the same budget.
enum Sparsity {
    Dense,
    Infinigen(CpuInfinigen),
    H2o { h2o: H2o, stats: IgStats },
}

/// InfiniGen's state on the reference: the partial skew columns and the partial key cache.
struct CpuInfinigen {
    params: IgParams,
    r: usize,
    /// Per layer: [n_head_kv][head_dim][r].
    partial: Vec<Vec<f32>>,
    /// Per layer: [n_ctx][n_head_kv][r].
    pkeys: Vec<Vec<f32>>,
    /// The pool's entries when it has a capacity; K/V stay at their positions here, and
    /// attention reads the positions the entries hold.
    slots: Option<SlotMap>,
    /// Fetches of each entry, summed over sparse layers and KV heads.
    fetches: Vec<u32>,
    stats: IgStats,
}

impl CpuInfinigen {
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
}

impl CpuModel {
    /// Loads every weight into memory as f32, with exactly the values the Vulkan executor's
    /// packed weights hold, and a KV cache of `n_ctx` positions.
    pub fn load(
        file: &GgufFile,
        model: &ResolvedModel,
        n_ctx: usize,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let config = ModelConfig::from_resolved(file.path(), model)?;
        let mut reader = WeightReader::new(file, model, &config, progress);
        let token_embd = reader.token_embd()?.to_f32();
        let output_norm = reader.output_norm()?;
        let output = reader.output()?.map(|m| m.to_f32());
        let layers = (0..config.n_layer)
            .map(|l| Ok(reader.layer(l)?.map(|m| m.to_f32(), |v| v)))
            .collect::<Result<Vec<_>>>()?;
        reader.finish()?;
        let kv = n_ctx * config.n_head_kv * config.head_dim;
        let rope_table = match config.rope {
            Some(r) => ops::rope_table(n_ctx, r.dims, r.base as f64),
            None => Vec::new(),
        };
        Ok(Self {
            token_embd,
            output_norm,
            output,
            layers,
            k_cache: vec![vec![0.0; kv]; config.n_layer],
            v_cache: vec![vec![0.0; kv]; config.n_layer],
            rope_table,
            n_ctx,
            len: 0,
            config,
            sparsity: Sparsity::Dense,
            captured: None,
        })
    }

    /// Runs `tokens` from an empty cache and returns every layer's queries and keys after
    /// RoPE: what skewing is computed from. The cache is empty afterwards.
    pub fn calibrate(&mut self, tokens: &[u32]) -> Result<Calibration> {
        self.truncate(0);
        self.captured = Some(vec![Vec::new(); self.config.n_layer]);
        let run = self.forward(tokens, Logits::Last);
        let queries = self.captured.take().unwrap_or_default();
        let kv_dim = self.config.n_head_kv * self.config.head_dim;
        let keys = self
            .k_cache
            .iter()
            .map(|k| k[..tokens.len() * kv_dim].to_vec())
            .collect();
        self.truncate(0);
        run.map(|_| Calibration { queries, keys })
    }

    /// Turns InfiniGen decode on (`Some`, in place of H2O) or off. Decode steps then attend,
    /// from layer `dense_layers` on, only to the tokens speculation selects, plus the new one.
    pub fn enable_infinigen(&mut self, setup: Option<(&Skew, IgParams)>) {
        let Some((skew, params)) = setup else {
            if matches!(self.sparsity, Sparsity::Infinigen(_)) {
                self.sparsity = Sparsity::Dense;
            }
            return;
        };
        self.sparsity = Sparsity::Infinigen({
            let c = &self.config;
            let r = skew.partial_dims(params.partial_ratio);
            let partial: Vec<Vec<f32>> = (0..c.n_layer).map(|l| skew.partial(l, r)).collect();
            let mut pkeys = vec![vec![0f32; self.n_ctx * c.n_head_kv * r]; c.n_layer];
            for (l, pk) in pkeys.iter_mut().enumerate() {
                for p in 0..self.len {
                    partial_key(c, &self.k_cache[l], &partial[l], r, p, pk);
                }
            }
            let slots = params.pool_capacity.map(|capacity| {
                let mut map = SlotMap::new(capacity, params.recent).keeping_first(SINKS);
                map.append(self.len);
                map
            });
            CpuInfinigen {
                params,
                r,
                partial,
                pkeys,
                slots,
                fetches: vec![0; self.n_ctx],
                stats: IgStats::default(),
            }
        });
    }

    /// Turns H2O on (`Some`, in place of InfiniGen) or off. From layer `dense_layers` on,
    /// each KV head then keeps at most `params.budget_tokens(len)` positions: the recent half
    /// of that budget and the heavy hitters among older ones. Of the positions already
    /// cached, with no attention mass yet, each head keeps the newest budget's worth.
    pub fn enable_h2o(&mut self, params: Option<IgParams>) {
        match params {
            Some(params) => {
                let c = &self.config;
                let h2o = H2o::new(params, c.n_layer, c.n_head_kv, self.n_ctx, self.len);
                let stats = IgStats::default();
                self.sparsity = Sparsity::H2o { h2o, stats };
            }
            None if matches!(self.sparsity, Sparsity::H2o { .. }) => {
                self.sparsity = Sparsity::Dense
            }
            None => {}
        }
    }

    /// H2O's state, when it is on.
    pub fn h2o(&self) -> Option<&H2o> {
        match &self.sparsity {
            Sparsity::H2o { h2o, .. } => Some(h2o),
            _ => None,
        }
    }
}

/// Writes the partial key of position `p` (its K after RoPE times the partial skew columns)
/// into `pkeys`.
fn partial_key(
    c: &ModelConfig,
    k_cache: &[f32],
    partial: &[f32],
    r: usize,
    p: usize,
    pkeys: &mut [f32],
) {
    let (hd, n_kv) = (c.head_dim, c.n_head_kv);
    for g in 0..n_kv {
        let k = &k_cache[(p * n_kv + g) * hd..][..hd];
        let a = &partial[g * hd * r..][..hd * r];
        let out = &mut pkeys[(p * n_kv + g) * r..][..r];
        for (col, o) in out.iter_mut().enumerate() {
            *o = (0..hd).map(|i| k[i] * a[i * r + col]).sum();
        }
    }
}

/// A copy of the CPU reference's KV cache: what a beam search without an indirect cache
/// copies when it reorders beams.
#[derive(Clone, Debug)]
pub struct CpuKvState {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    len: usize,
}

impl CpuModel {
    /// A copy of the KV cache (positions 0..len).
    pub fn kv_state(&self) -> CpuKvState {
        let used = self.len * self.config.n_head_kv * self.config.head_dim;
        let copy = |c: &Vec<Vec<f32>>| c.iter().map(|l| l[..used].to_vec()).collect();
        CpuKvState {
            k: copy(&self.k_cache),
            v: copy(&self.v_cache),
            len: self.len,
        }
    }

    /// Puts back a cache taken with [`kv_state`](Self::kv_state).
    pub fn set_kv_state(&mut self, state: &CpuKvState) {
        for (dst, src) in self.k_cache.iter_mut().zip(&state.k) {
            dst[..src.len()].copy_from_slice(src);
        }
        for (dst, src) in self.v_cache.iter_mut().zip(&state.v) {
            dst[..src.len()].copy_from_slice(src);
        }
        self.len = state.len;
    }
}

impl Backend for CpuModel {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn len(&self) -> usize {
        self.len
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        if let Sparsity::Infinigen(CpuInfinigen {
            slots: Some(map),
            fetches,
            ..
        }) = &mut self.sparsity
        {
            let entries = map.slots();
            let kept = map.truncate(len);
            fetches[kept..entries].fill(0);
            self.len = map.next_position();
        }
        if let Sparsity::H2o { h2o, .. } = &mut self.sparsity {
            h2o.truncate(self.len);
        }
    }

    fn as_cpu_mut(&mut self) -> Option<&mut CpuModel> {
        Some(self)
    }

    fn set_kv_policy(&mut self, choice: KvPolicyChoice) -> Result<()> {
        match choice {
            KvPolicyChoice::Dense => { self.sparsity = Sparsity::Dense; }
            KvPolicyChoice::Infinigen { skew, params } => self.enable_infinigen(Some((skew, params))),
            KvPolicyChoice::H2o(params) => self.enable_h2o(Some(params)),
        }
        Ok(())
    }

    fn kv_policy_stats(&self) -> Option<KvPolicyStats> {
        match &self.sparsity {
            Sparsity::Infinigen(ig) => Some(KvPolicyStats { policy: KvPolicyKind::Infinigen, tokens: ig.stats }),
            Sparsity::H2o { stats, .. } => Some(KvPolicyStats { policy: KvPolicyKind::H2o, tokens: *stats }),
            Sparsity::Dense => None,
        }
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let c = self.config.clone();
        check_step(&c, tokens, self.len, self.n_ctx)?;
        let (n, e, hd) = (tokens.len(), c.n_embd, c.head_dim);
        let kv_dim = c.n_head_kv * hd;
        let pos0 = self.len;
        // With a pool capacity: the positions held before this step's tokens, in entry order.
        let held = match &mut self.sparsity {
            Sparsity::Infinigen(ig) => ig.make_room(n)?,
            _ => None,
        };
        let entries = held.as_ref().map_or(pos0, Vec::len);
        let all_held = || held.as_ref().map(|h| vec![h.clone(); c.n_head_kv]);

        // x: (n, n_embd), the residual stream
        let mut x: Vec<f32> = tokens
            .iter()
            .flat_map(|&t| &self.token_embd[t as usize * e..(t as usize + 1) * e])
            .copied()
            .collect();

        // Layer l-1's input (the residual stream), from which InfiniGen speculates layer l.
        let mut prev_x: Option<Vec<f32>> = None;
        for (l, w) in self.layers.iter().enumerate() {
            // Attention block.
            let xn = ops::rmsnorm(&x, &w.attn_norm, e, c.norm_eps);
            // Per KV head, the earlier positions this step attends to (ascending), besides its
            // own tokens; `None`: all of them. Decode steps past the dense layers attend to
            // InfiniGen's speculated tokens only, or to what H2O keeps; longer steps attend
            // densely.
            let decode = n == 1 && pos0 > 0;
            let history = match (&mut self.sparsity, &prev_x) {
                (Sparsity::Infinigen(ig), _)
                    if decode && l >= ig.params.dense_layers && ig.params.fetches_all(entries) =>
                {
                    for _ in 0..c.n_head_kv {
                        ig.stats.record(entries, entries);
                    }
                    all_held()
                }
                (Sparsity::Infinigen(ig), Some(prev)) if decode && l >= ig.params.dense_layers => {
                    Some(speculate_layer(
                        &c,
                        ig,
                        l,
                        &w.wqkv,
                        &ops::rmsnorm(prev, &w.attn_norm, e, c.norm_eps),
                        pos0,
                        held.as_deref(),
                        &self.rope_table,
                    ))
                }
                (Sparsity::H2o { h2o, stats }, _) if decode && h2o.applies(l) => {
                    let kept: Vec<Vec<u32>> =
                        (0..c.n_head_kv).map(|g| h2o.kept(l, g).to_vec()).collect();
                    for k in &kept {
                        stats.record(k.len(), pos0);
                    }
                    Some(kept)
                }
                _ => all_held(),
            };
            let mut qkv = matmul(&xn, &w.wqkv, c.qkv_dim(), e); // (n, qkv_dim)
            for (t, row) in qkv.chunks_mut(c.qkv_dim()).enumerate() {
                let (qk, v) = row.split_at_mut((c.n_head + c.n_head_kv) * hd);
                if let Some(r) = c.rope {
                    let pos = [(pos0 + t) as u32];
                    let heads = c.n_head + c.n_head_kv;
                    ops::rope(qk, &pos, heads, hd, r.dims, r.layout, &self.rope_table);
                }
                let at = (pos0 + t) * kv_dim;
                self.k_cache[l][at..at + kv_dim].copy_from_slice(&qk[c.attn_dim()..]);
                self.v_cache[l][at..at + kv_dim].copy_from_slice(v);
                if let Sparsity::Infinigen(ig) = &mut self.sparsity {
                    partial_key(
                        &c,
                        &self.k_cache[l],
                        &ig.partial[l],
                        ig.r,
                        pos0 + t,
                        &mut ig.pkeys[l],
                    );
                }
                if let Some(captured) = &mut self.captured {
                    captured[l].extend_from_slice(&qk[..c.attn_dim()]);
                }
            }
            let mut att = vec![0f32; n * c.attn_dim()]; // (n, n_head * head_dim)
            let group = c.n_head / c.n_head_kv;
            let scale = 1.0 / (hd as f32).sqrt();
            for t in 0..n {
                let n_kv = pos0 + t + 1; // causal: positions 0..=pos0 + t
                for h in 0..c.n_head {
                    let q = &qkv[t * c.qkv_dim() + h * hd..][..hd];
                    let kvh = h / group;
                    let positions: Vec<usize> = match &history {
                        Some(hist) => hist[kvh]
                            .iter()
                            .map(|&p| p as usize)
                            .chain(pos0..=pos0 + t)
                            .collect(),
                        None => (0..n_kv).collect(),
                    };
                    let mut scores: Vec<f32> = positions
                        .iter()
                        .map(|&p| {
                            let k = &self.k_cache[l][p * kv_dim + kvh * hd..][..hd];
                            dot(q, k) * scale
                        })
                        .collect();
                    softmax_in_place(&mut scores);
                    if let Sparsity::H2o { h2o, .. } = &mut self.sparsity {
                        if h2o.applies(l) {
                            h2o.add_mass(l, kvh, &positions, &scores);
                        }
                    }
                    let out = &mut att[t * c.attn_dim() + h * hd..][..hd];
                    for (&p, &s) in positions.iter().zip(&scores) {
                        let v = &self.v_cache[l][p * kv_dim + kvh * hd..][..hd];
                        for (o, &vv) in out.iter_mut().zip(v) {
                            *o += s * vv;
                        }
                    }
                }
            }
            if let Sparsity::H2o { h2o, .. } = &mut self.sparsity {
                if h2o.applies(l) {
                    h2o.end_step(l, pos0..pos0 + n);
                }
            }
            if matches!(self.sparsity, Sparsity::Infinigen(_)) {
                prev_x = Some(x.clone());
            }
            add_in_place(&mut x, &matmul(&att, &w.wo, e, c.attn_dim()));

            // MLP block: down(silu(gate(xn)) * up(xn)).
            let xn = ops::rmsnorm(&x, &w.ffn_norm, e, c.norm_eps);
            let gate_up = matmul(&xn, &w.w_gate_up, 2 * c.n_ff, e); // (n, 2 n_ff)
            let hidden: Vec<f32> = gate_up
                .chunks(2 * c.n_ff)
                .flat_map(|row| {
                    let (g, u) = row.split_at(c.n_ff);
                    ops::swiglu(g, u)
                })
                .collect(); // (n, n_ff)
            add_in_place(&mut x, &matmul(&hidden, &w.w_down, e, c.n_ff));
        }

        let rows = match logits {
            Logits::All => &x[..],
            Logits::Last => &x[(n - 1) * e..],
        };
        let xn = ops::rmsnorm(rows, &self.output_norm, e, c.norm_eps);
        let head = self.output.as_ref().unwrap_or(&self.token_embd);
        let out = matmul(&xn, head, c.n_vocab, e);
        self.len += n;
        Ok(out)
    }
}

/// InfiniGen's speculation for layer `l` at a decode step at `pos`: layer l's query from
/// `early_xn` (layer l-1's input, normalized with layer l's gain), its partial columns against
/// the partial key cache, and per KV head the positions selected (ascending).
fn speculate_layer(
    c: &ModelConfig,
    ig: &mut CpuInfinigen,
    l: usize,
    wqkv: &[f32],
    early_xn: &[f32],
    pos: usize,
    held: Option<&[u32]>,
    rope_table: &[[f32; 2]],
) -> Vec<Vec<u32>> {
    let (hd, r) = (c.head_dim, ig.r);
    let group = c.n_head / c.n_head_kv;
    // The query rows come first in the fused projection.
    let mut q = matmul(
        early_xn,
        &wqkv[..c.attn_dim() * c.n_embd],
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
            rope_table,
        );
    }
    let partial = &ig.partial[l];
    let mut qp = vec![0f32; c.n_head * r];
    for h in 0..c.n_head {
        let a = &partial[(h / group) * hd * r..][..hd * r];
        let qh = &q[h * hd..][..hd];
        for (col, o) in qp[h * r..][..r].iter_mut().enumerate() {
            *o = (0..hd).map(|i| qh[i] * a[i * r + col]).sum();
        }
    }
    // The entries held, in entry order: every earlier position, or what the pool kept.
    let n = held.map_or(pos, <[u32]>::len);
    let position = |t: usize| held.map_or(t, |h| h[t] as usize);
    let stride = c.n_head_kv * r;
    let pk: Vec<f32> = (0..n)
        .flat_map(|t| &ig.pkeys[l][position(t) * stride..][..stride])
        .copied()
        .collect();
    let scores = infinigen::select::speculate(&qp, &pk, c.n_head, c.n_head_kv, r, hd);
    let budget = ig.params.budget_tokens(n);
    let (alpha, recent) = (ig.params.alpha, ig.params.recent);
    let k = infinigen::select::fetch_count(&scores, n, c.n_head, alpha, budget, recent);
    let is_recent = |t: usize| position(t) + recent >= pos;
    (0..c.n_head_kv)
        .map(|g| {
            let sel =
                infinigen::select::select_among(&scores, n, c.n_head, c.n_head_kv, g, k, is_recent);
            ig.stats.record(sel.len(), n);
            for &t in &sel {
                ig.fetches[t as usize] += 1;
            }
            sel.into_iter()
                .map(|t| position(t as usize) as u32)
                .collect()
        })
        .collect()
}

/// Checks a step before any work: ids in the vocabulary, positions within the context.
pub(crate) fn check_step(c: &ModelConfig, tokens: &[u32], len: usize, n_ctx: usize) -> Result<()> {
    if tokens.is_empty() {
        return Err(Error::options("tokens", "a step needs at least one token"));
    }
    if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.n_vocab) {
        return Err(Error::BadToken {
            id,
            n_vocab: c.n_vocab,
        });
    }
    if len + tokens.len() > n_ctx {
        return Err(Error::ContextFull {
            needed: tokens.len(),
            used: len,
            n_ctx,
        });
    }
    Ok(())
}

/// y (n, m) = x (n, k) times w (m, k) transposed, rows of w split across cores.
fn matmul(x: &[f32], w: &[f32], m: usize, k: usize) -> Vec<f32> {
    let n = x.len() / k;
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let rows_per = m.div_ceil(threads).max(1);
    // Each thread fills a slice of output columns for every token: out_t[r - r0, tok].
    let parts: Vec<Vec<f32>> = std::thread::scope(|s| {
        let jobs: Vec<_> = w
            .chunks(rows_per * k)
            .map(|wc| {
                s.spawn(move || {
                    let mut part = Vec::with_capacity(n * wc.len() / k);
                    for row in wc.chunks(k) {
                        for xt in x.chunks(k) {
                            part.push(dot(row, xt));
                        }
                    }
                    part
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("matmul thread panicked"))
            .collect()
    });
    let mut y = vec![0f32; n * m];
    let mut r = 0;
    for part in parts {
        for (i, chunk) in part.chunks(n).enumerate() {
            for (t, &v) in chunk.iter().enumerate() {
                y[t * m + r + i] = v;
            }
        }
        r += part.len() / n.max(1);
    }
    y
}

/// Dot product over eight running sums (which the compiler keeps in vector registers).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, at) = a.split_at(a.len() / 8 * 8);
    let (bc, bt) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = at.iter().zip(bt).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
