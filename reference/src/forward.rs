//! The reference forward pass: plain f32 on the CPU, written to be read top to bottom.
//! It is the oracle the Vulkan executor is tested against, so it favours clarity over speed;
//! the matrix products are only split across cores and over several accumulators so that a
//! few thousand tokens of perplexity take minutes, not hours.

use hearth_models::{GgufFile, ResolvedModel};

use super::latent::LatentStep;
use super::matmul::{add_in_place, matmul};
use super::moe::ExpertWeights;
use super::ops;
use super::policy::{self, CpuH2o, CpuPolicy, Dense, LayerValues};
use hearth_model::activations::Activations;
use hearth_model::kv::h2o::H2o;
use hearth_model::kv::infinigen::Calibration;
use hearth_model::kv::policy::{KvPolicyChoice, KvPolicyStats};
use hearth_model::kv::stored::round_row;
use hearth_model::kv::KvType;
use hearth_model::Result;
use hearth_model::{
    check_step, Backend, Layer, Logits, Mlp, ModelConfig, ProgressFn, WeightReader,
};

/// One block's weights as f32: the exact values of the packed matrices the device holds.
pub(super) type CpuLayer = Layer<Vec<f32>, Vec<f32>>;

pub struct CpuModel {
    config: ModelConfig,
    /// [n_vocab, n_embd]
    token_embd: Vec<f32>,
    /// [n_embd]
    output_norm: Vec<f32>,
    /// [n_vocab, n_embd]; `None` when tied to `token_embd`.
    output: Option<Vec<f32>>,
    layers: Vec<CpuLayer>,
    /// Per layer: [n_ctx, n_head_kv * head_dim], each head's row rounded as a cache of
    /// `kv_type` holds it.
    k_cache: Vec<Vec<f32>>,
    v_cache: Vec<Vec<f32>>,
    /// [n_ctx, rot_dim / 2] of (cos, sin).
    rope_table: Vec<[f32; 2]>,
    /// The same for local layers that rotate with a base of their own.
    local_rope_table: Option<Vec<[f32; 2]>>,
    kv_type: KvType,
    n_ctx: usize,
    len: usize,
    /// Which positions attention reads.
    policy: Box<dyn CpuPolicy>,
    /// Post-RoPE queries per layer, collected while calibrating.
    captured: Option<Vec<Vec<f32>>>,
    /// Squared inputs of every matrix, collected for an importance matrix.
    activations: Option<Activations>,
}

impl CpuModel {
    /// Loads every weight into memory as f32, with exactly the values the Vulkan executor's
    /// packed weights hold, and a KV cache of `n_ctx` positions holding the default
    /// [`KvType`] (see [`set_kv_type`](Self::set_kv_type)).
    pub fn load(
        file: &GgufFile,
        model: &ResolvedModel,
        n_ctx: usize,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let config = ModelConfig::from_resolved(file, model)?;
        let mut reader = WeightReader::new(file, model, &config, progress);
        let token_embd = reader.token_embd()?.to_f32();
        let output_norm = reader.output_norm()?;
        let output = reader.output()?.map(|m| m.to_f32());
        let layers = (0..config.n_layer)
            .map(|l| Ok(reader.layer(l)?.map(|m| m.to_f32(), |v| v)))
            .collect::<Result<Vec<_>>>()?;
        reader.finish()?;
        let kv = n_ctx * config.n_head_kv * config.head_dim;
        // Latent attention's values are its keys' first values: no V is stored.
        let v_kv = if config.latent.is_some() { 0 } else { kv };
        let rope_table = config.rope_table(n_ctx).unwrap_or_default();
        let local_rope_table = config.local_rope_table(n_ctx);
        Ok(Self {
            token_embd,
            output_norm,
            output,
            layers,
            k_cache: vec![vec![0.0; kv]; config.n_layer],
            v_cache: vec![vec![0.0; v_kv]; config.n_layer],
            rope_table,
            local_rope_table,
            kv_type: KvType::default(),
            n_ctx,
            len: 0,
            config,
            policy: Box::new(Dense),
            captured: None,
            activations: None,
        })
    }

    /// Rounds K and V from now on as a cache of `kv_type` stores them (the device's
    /// `--kv-type`); the model's head_dim must be a multiple of `kv_type.group()`
    /// (`kv::check_kv_type`).
    pub fn set_kv_type(&mut self, kv_type: KvType) {
        self.kv_type = kv_type;
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

    /// Starts summing the squared inputs of every matrix over the steps that follow (all of
    /// their tokens, whatever logits they return).
    pub fn collect_activations(&mut self) {
        self.activations = Some(Activations::new(self.config.n_layer));
    }

    /// What was collected since [`collect_activations`](Self::collect_activations), which
    /// stops collecting.
    pub fn take_activations(&mut self) -> Option<Activations> {
        self.activations.take()
    }

    /// H2O's state, when it runs.
    pub fn h2o(&self) -> Option<&H2o> {
        let h2o = self.policy.as_any().downcast_ref::<CpuH2o>()?;
        Some(&h2o.h2o)
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
        let copy = |c: &Vec<Vec<f32>>| c.iter().map(|l| l[..used.min(l.len())].to_vec()).collect();
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
        self.len = self.policy.truncate(self.len, len);
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn set_kv_policy(&mut self, choice: KvPolicyChoice) -> Result<()> {
        choice.check_model(&self.config)?;
        let c = &self.config;
        self.policy = policy::start(c, choice, &self.k_cache, self.len, self.n_ctx);
        Ok(())
    }

    fn kv_policy_stats(&self) -> Option<KvPolicyStats> {
        self.policy.stats()
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        let c = self.config.clone();
        check_step(&c, tokens, self.len, self.n_ctx)?;
        let (n, e) = (tokens.len(), c.n_embd);
        let pos0 = self.len;
        self.policy.begin_step(n)?;

        // x: (n, n_embd), the residual stream
        let mut x: Vec<f32> = tokens
            .iter()
            .flat_map(|&t| &self.token_embd[t as usize * e..(t as usize + 1) * e])
            .copied()
            .collect();
        if let Some(scale) = c.embd_scale {
            x.iter_mut().for_each(|v| *v *= scale);
        }
        for l in 0..c.n_layer {
            // Attention block: norm and QKV, RoPE and the K/V append, the policy's attention,
            // the output projection.
            let w = &self.layers[l];
            let xn = ops::rmsnorm(&x, &w.attn_norm, e, c.norm_eps);
            if let Some(a) = &mut self.activations {
                a.layers[l].qkv.add(&xn, e);
            }
            let mut qkv = matmul(&xn, &w.wqkv, c.qkv_dim(), e); // (n, qkv_dim)
            if c.latent.is_some() {
                let step = LatentStep {
                    config: &c,
                    weights: w,
                    rope_table: c
                        .rope_at(l)
                        .map(|_| layer_rope_table(&c, l, &self.rope_table, &self.local_rope_table)),
                    kv_type: self.kv_type,
                    pos0,
                };
                let att = step.attend(&qkv, &mut self.k_cache[l]);
                self.attention_output(l, &mut x, &att);
                self.mlp(l, &mut x);
                continue;
            }
            ops::qkv_adjust(
                &mut qkv,
                w.qkv_adjust(c.norm_eps, c.qk_norm_whole),
                c.n_head,
                c.n_head_kv,
                c.head_dim,
            );
            self.rope_append(l, &mut qkv, pos0);
            let w = &self.layers[l];
            let att = self.policy.attention(&LayerValues {
                config: &c,
                l,
                weights: w,
                x: &x,
                qkv: &qkv,
                k_cache: &self.k_cache[l],
                v_cache: &self.v_cache[l],
                pos0,
                n,
                rope_table: layer_rope_table(&c, l, &self.rope_table, &self.local_rope_table),
            });
            self.attention_output(l, &mut x, &att);
            self.mlp(l, &mut x);
        }

        let rows = match logits {
            Logits::All => &x[..],
            Logits::Last => &x[(n - 1) * e..],
        };
        let xn = ops::rmsnorm(rows, &self.output_norm, e, c.norm_eps);
        if let Some(a) = &mut self.activations {
            a.output.add(&xn, e);
        }
        let head = self.output.as_ref().unwrap_or(&self.token_embd);
        let mut out = matmul(&xn, head, c.n_vocab, e);
        if let Some(cap) = c.logit_softcap {
            ops::softcap(&mut out, cap);
        }
        self.len += n;
        Ok(out)
    }
}

impl CpuModel {
    /// x += layer `l`'s output projection of its attention `att` ([n, attn_dim]).
    fn attention_output(&mut self, l: usize, x: &mut [f32], att: &[f32]) {
        let c = &self.config;
        let e = c.n_embd;
        let w = &self.layers[l];
        if let Some(a) = &mut self.activations {
            a.layers[l].attn_output.add(att, c.attn_dim());
        }
        let mut out = matmul(att, &w.wo, e, c.attn_dim());
        if let Some(bias) = &w.wo_bias {
            ops::add_bias(&mut out, bias);
        }
        add_in_place(x, &post_norm(out, &w.attn_post_norm, c));
    }

    /// x += layer `l`'s MLP block: down(act(gate(xn)) * up(xn)), or its experts'.
    fn mlp(&mut self, l: usize, x: &mut [f32]) {
        let c = &self.config;
        let e = c.n_embd;
        let w = &self.layers[l];
        let xn = ops::rmsnorm(x, &w.ffn_norm, e, c.norm_eps);
        if let Some(a) = &mut self.activations {
            a.layers[l].gate_up.add(&xn, e);
        }
        let out = match &w.mlp {
            Mlp::Dense { gate_up, down } => {
                let gate_up = matmul(&xn, gate_up, 2 * c.n_ff, e); // (n, 2 n_ff)
                let hidden: Vec<f32> = gate_up
                    .chunks(2 * c.n_ff)
                    .flat_map(|row| {
                        let (g, u) = row.split_at(c.n_ff);
                        c.mlp_act.apply(g, u)
                    })
                    .collect(); // (n, n_ff)
                if let Some(a) = &mut self.activations {
                    a.layers[l].down.add(&hidden, c.n_ff);
                }
                matmul(&hidden, down, e, c.n_ff)
            }
            Mlp::Experts {
                router,
                gate_up,
                down,
                shared,
            } => {
                let experts = ExpertWeights {
                    router,
                    gate_up,
                    down,
                    shared: shared.as_ref().map(|sh| (&sh.gate_up[..], &sh.down[..])),
                    bias: w.expert_bias.as_ref(),
                    select_bias: w.expert_select_bias.as_deref(),
                };
                experts.forward(&xn, c)
            }
        };
        add_in_place(x, &post_norm(out, &w.ffn_post_norm, c));
    }
}

/// Layer `l`'s RoPE table: the local one where the layer has it.
fn layer_rope_table<'t>(
    c: &ModelConfig,
    l: usize,
    global: &'t [[f32; 2]],
    local: &'t Option<Vec<[f32; 2]>>,
) -> &'t [[f32; 2]] {
    match local {
        Some(local) if c.local_rope(l) => local,
        _ => global,
    }
}

/// A block's output [n, n_embd], normed where the model norms it before the residual add.
fn post_norm(out: Vec<f32>, gain: &Option<Vec<f32>>, c: &ModelConfig) -> Vec<f32> {
    match gain {
        Some(w) => ops::rmsnorm(&out, w, c.n_embd, c.norm_eps),
        None => out,
    }
}

impl CpuModel {
    /// RoPE on the step's queries and keys in `qkv` (tokens at positions pos0..), and their
    /// K/V into layer `l`'s cache.
    fn rope_append(&mut self, l: usize, qkv: &mut [f32], pos0: usize) {
        let c = &self.config;
        let hd = c.head_dim;
        let kv_dim = c.n_head_kv * hd;
        let rows = qkv.len() / c.qkv_dim();
        for (t, row) in qkv.chunks_mut(c.qkv_dim()).enumerate() {
            let (qk, v) = row.split_at_mut((c.n_head + c.n_head_kv) * hd);
            if let Some(r) = c.rope_at(l) {
                let pos = [(pos0 + t) as u32];
                let heads = c.n_head + c.n_head_kv;
                let table = layer_rope_table(c, l, &self.rope_table, &self.local_rope_table);
                ops::rope(qk, &pos, heads, hd, r.dims, r.layout, table);
            }
            // K and V as the cache keeps them; the key goes back beside the queries rounded,
            // as rope_kv leaves it on the device.
            for head in qk[c.attn_dim()..].chunks_mut(hd).chain(v.chunks_mut(hd)) {
                round_row(self.kv_type, head);
            }
            let at = (pos0 + t) * kv_dim;
            self.k_cache[l][at..at + kv_dim].copy_from_slice(&qk[c.attn_dim()..]);
            self.v_cache[l][at..at + kv_dim].copy_from_slice(v);
            if let Some(captured) = &mut self.captured {
                captured[l].extend_from_slice(&qk[..c.attn_dim()]);
            }
        }
        self.policy.appended(l, &self.k_cache[l], pos0..pos0 + rows);
    }
}
