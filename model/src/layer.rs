//! One transformer block's weights, whatever holds them: packed matrices read from the file
//! ([`LayerWeights`]), device buffers (the Vulkan executor) or f32 values (the CPU
//! reference). Every executor walks the same fields.

use crate::Projection;

/// One block's weights: `M` holds a matrix (row-major [out, in]), `V` a norm gain.
pub struct Layer<M, V> {
    /// [n_embd]
    pub attn_norm: V,
    /// [(n_head + 2 n_head_kv) * head_dim, n_embd]: q rows, then k rows, then v rows. With
    /// latent attention, [qkv_dim, n_embd]: the query rows (or their low-rank part's), then
    /// the latent's and the rotated key's.
    pub wqkv: M,
    /// [qkv_dim]: the q, k and v projections' biases, where the model has them (Qwen2).
    pub qkv_bias: Option<V>,
    /// [head_dim] each: RMSNorm gains over every query head and every key head, applied
    /// before RoPE, where the model has them (Qwen3).
    pub q_norm: Option<V>,
    pub k_norm: Option<V>,
    /// [n_embd, n_head * head_dim]
    pub wo: M,
    /// [n_embd]: the output projection's bias, where the model has one (GPT-OSS).
    pub wo_bias: Option<V>,
    /// [n_head]: each query head's sink, a logit that joins its softmax's denominator and
    /// has no value, where the model has them (GPT-OSS).
    pub attn_sinks: Option<V>,
    /// [n_embd] each: norms of the attention and MLP outputs before their residual adds,
    /// where the model has them (Gemma 2).
    pub attn_post_norm: Option<V>,
    pub ffn_post_norm: Option<V>,
    /// [n_embd]
    pub ffn_norm: V,
    pub mlp: Mlp<M>,
    /// A mixture of experts' biases, where it has them (GPT-OSS).
    pub expert_bias: Option<ExpertBias<V>>,
    /// [n_expert]: a mixture of experts' selection bias, added to the gating's weights to
    /// choose the experts but not to weigh them, where it has one (GLM-4.5).
    pub expert_select_bias: Option<V>,
    /// Latent attention's weights beyond `wqkv`, where the model has it (DeepSeek-V2/V3).
    pub latent: Option<LatentWeights<M, V>>,
}

/// Latent attention's weights after the input's projection (`wqkv`), with `ModelConfig`'s
/// `latent` widths: kv_lora, nope, rope, v_dim and q_lora.
pub struct LatentWeights<M, V> {
    /// [q_lora]: the RMSNorm of the queries' low-rank part, and [n_head * (nope + rope),
    /// q_lora] the queries from it, where the queries go through a low rank.
    pub q_a_norm: Option<V>,
    pub wq_b: Option<M>,
    /// [kv_lora]: the latent's RMSNorm.
    pub kv_a_norm: V,
    /// [n_head * kv_lora, nope]: head h's rows from h * kv_lora, each a latent value's
    /// weights on the key's unrotated part: it takes head h's unrotated query into the
    /// latent's space.
    pub wk_b: M,
    /// [n_head * v_dim, kv_lora]: head h's rows from h * v_dim, its value from the latent.
    pub wv_b: M,
}

/// The biases of a mixture of experts' router and of every expert's products, in the rows'
/// order of `Mlp::Experts`.
pub struct ExpertBias<V> {
    /// [n_expert]
    pub router: V,
    /// [n_expert * 2 n_ff_exp]: expert e's gate biases from e * 2 n_ff_exp, then its up
    /// biases.
    pub gate_up: V,
    /// [n_expert * n_embd]
    pub down: V,
}

/// A block's MLP: one gated MLP, or a mixture of experts.
pub enum Mlp<M> {
    Dense {
        /// [2 n_ff, n_embd]: gate rows, then up rows.
        gate_up: M,
        /// [n_embd, n_ff]
        down: M,
    },
    Experts {
        /// [n_expert, n_embd]: each expert's logit; one more row, the shared expert's gate,
        /// where it has one.
        router: M,
        /// [n_expert * 2 n_ff_exp, n_embd]: expert e's gate rows from e * 2 n_ff_exp, then
        /// its up rows, so that one gated product reads an expert's rows together.
        gate_up: M,
        /// [n_expert * n_embd, n_ff_exp]: expert e's rows from e * n_embd.
        down: M,
        /// The expert every token runs besides its routed ones (Qwen2-MoE).
        shared: Option<SharedMlp<M>>,
    },
}

/// A shared expert's gated MLP.
pub struct SharedMlp<M> {
    /// [2 n_ff_shexp, n_embd]: gate rows, then up rows.
    pub gate_up: M,
    /// [n_embd, n_ff_shexp]
    pub down: M,
}

impl<M, V> Layer<M, V> {
    /// The query and key norm gains, when the block has them.
    pub fn qk_norm(&self) -> Option<(&V, &V)> {
        self.q_norm.as_ref().zip(self.k_norm.as_ref())
    }
}

impl<M> Layer<M, Vec<f32>> {
    /// The block's bias and query/key norm on the q/k/v projection's output, as the CPU
    /// reference applies them (`eps` is the model's norm epsilon).
    pub fn qkv_adjust(&self, eps: f32, whole: bool) -> crate::ops::QkvAdjust<'_> {
        crate::ops::QkvAdjust {
            bias: self.qkv_bias.as_deref(),
            qk_norm: self.qk_norm().map(|(q, k)| (&q[..], &k[..], eps)),
            whole,
        }
    }
}

/// A block's weights as the file holds them, matrices packed in their formats (a fused
/// projection in its parts' formats).
pub type LayerWeights = Layer<Projection, Vec<f32>>;

impl<M, V> Layer<M, V> {
    /// The same weights held otherwise: `matrix` and `vector` convert each, given its name
    /// within the block ("attn_qkv", "ffn_norm", ...), in the order of the fields.
    pub fn try_map<M2, V2, E>(
        self,
        mut matrix: impl FnMut(&str, M) -> Result<M2, E>,
        mut vector: impl FnMut(&str, V) -> Result<V2, E>,
    ) -> Result<Layer<M2, V2>, E> {
        Ok(Layer {
            attn_norm: vector("attn_norm", self.attn_norm)?,
            wqkv: matrix("attn_qkv", self.wqkv)?,
            qkv_bias: self
                .qkv_bias
                .map(|v| vector("attn_qkv_bias", v))
                .transpose()?,
            q_norm: self.q_norm.map(|v| vector("attn_q_norm", v)).transpose()?,
            k_norm: self.k_norm.map(|v| vector("attn_k_norm", v)).transpose()?,
            wo: matrix("attn_output", self.wo)?,
            wo_bias: self
                .wo_bias
                .map(|v| vector("attn_output_bias", v))
                .transpose()?,
            attn_sinks: self
                .attn_sinks
                .map(|v| vector("attn_sinks", v))
                .transpose()?,
            attn_post_norm: self
                .attn_post_norm
                .map(|v| vector("attn_post_norm", v))
                .transpose()?,
            ffn_post_norm: self
                .ffn_post_norm
                .map(|v| vector("ffn_post_norm", v))
                .transpose()?,
            ffn_norm: vector("ffn_norm", self.ffn_norm)?,
            mlp: match self.mlp {
                Mlp::Dense { gate_up, down } => Mlp::Dense {
                    gate_up: matrix("ffn_gate_up", gate_up)?,
                    down: matrix("ffn_down", down)?,
                },
                Mlp::Experts {
                    router,
                    gate_up,
                    down,
                    shared,
                } => Mlp::Experts {
                    router: matrix("ffn_gate_inp", router)?,
                    gate_up: matrix("ffn_gate_up_exps", gate_up)?,
                    down: matrix("ffn_down_exps", down)?,
                    shared: match shared {
                        Some(sh) => Some(SharedMlp {
                            gate_up: matrix("ffn_gate_up_shexp", sh.gate_up)?,
                            down: matrix("ffn_down_shexp", sh.down)?,
                        }),
                        None => None,
                    },
                },
            },
            expert_bias: match self.expert_bias {
                Some(b) => Some(ExpertBias {
                    router: vector("ffn_gate_inp_bias", b.router)?,
                    gate_up: vector("ffn_gate_up_exps_bias", b.gate_up)?,
                    down: vector("ffn_down_exps_bias", b.down)?,
                }),
                None => None,
            },
            expert_select_bias: self
                .expert_select_bias
                .map(|v| vector("exp_probs_b", v))
                .transpose()?,
            latent: match self.latent {
                Some(l) => Some(LatentWeights {
                    q_a_norm: l.q_a_norm.map(|v| vector("attn_q_a_norm", v)).transpose()?,
                    wq_b: l.wq_b.map(|m| matrix("attn_q_b", m)).transpose()?,
                    kv_a_norm: vector("attn_kv_a_norm", l.kv_a_norm)?,
                    wk_b: matrix("attn_k_b", l.wk_b)?,
                    wv_b: matrix("attn_v_b", l.wv_b)?,
                }),
                None => None,
            },
        })
    }

    /// [`try_map`](Self::try_map) for conversions that cannot fail.
    pub fn map<M2, V2>(
        self,
        mut matrix: impl FnMut(M) -> M2,
        mut vector: impl FnMut(V) -> V2,
    ) -> Layer<M2, V2> {
        let done = self.try_map(
            |_, m| Ok::<_, std::convert::Infallible>(matrix(m)),
            |_, v| Ok(vector(v)),
        );
        match done {
            Ok(layer) => layer,
            Err(never) => match never {},
        }
    }
}
