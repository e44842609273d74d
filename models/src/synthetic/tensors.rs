//! The tensors of a synthetic file, in file order, with the names, shapes and kinds of values
//! llama.cpp's converter gives the family.

use hearth_quant::Format;

use super::Shape;

impl Shape {
    /// Every tensor of the file, in file order.
    pub(super) fn tensors(&self) -> Vec<TensorPlan> {
        let (e, ff, v) = (self.n_embd, self.n_ff, self.n_vocab);
        let (q, kv) = (
            self.n_head * self.head_dim(),
            self.n_head_kv * self.head_dim(),
        );
        let hd = self.head_dim();
        let plan = |name: String, n_in, n_out| TensorPlan {
            name,
            n_in,
            n_out,
            stack: 1,
            kind: if n_out == 1 {
                Values::Gain
            } else {
                Values::Matrix
            },
        };
        let varied = |name: String, n_in, kind| TensorPlan {
            name,
            n_in,
            n_out: 1,
            stack: 1,
            kind,
        };
        // With experts the tokens' embeddings differ too, so that tokens pick different
        // experts as in a trained model (identical rows would send all to the same ones).
        let mut t = vec![TensorPlan {
            kind: match self.experts {
                Some(_) => Values::VariedMatrix,
                None => Values::Matrix,
            },
            ..plan("token_embd.weight".into(), e, v)
        }];
        for l in 0..self.n_layer {
            let blk = |what: &str| format!("blk.{l}.{what}.weight");
            let bias = |what: &str| format!("blk.{l}.{what}.bias");
            let fused = self.family.fused();
            t.push(plan(blk("attn_norm"), e, 1));
            if fused {
                t.push(plan(blk("attn_qkv"), e, q + 2 * kv));
            } else {
                t.extend([
                    plan(blk("attn_q"), e, q),
                    plan(blk("attn_k"), e, kv),
                    plan(blk("attn_v"), e, kv),
                ]);
            }
            if self.family.qkv_bias() {
                t.extend([
                    varied(bias("attn_q"), q, Values::Bias),
                    varied(bias("attn_k"), kv, Values::Bias),
                    varied(bias("attn_v"), kv, Values::Bias),
                ]);
            }
            if self.family.qk_norm() {
                t.extend([
                    varied(blk("attn_q_norm"), hd, Values::VariedGain),
                    varied(blk("attn_k_norm"), hd, Values::VariedGain),
                ]);
            }
            t.push(plan(blk("attn_output"), q, e));
            if self.family.sandwich() {
                t.push(varied(blk("post_attention_norm"), e, Values::VariedGain));
            }
            t.push(plan(blk("ffn_norm"), e, 1));
            if let Some(x) = self.experts {
                // The router's rows differ (identical rows would tie every expert), and the
                // experts are stacked [count, rows, n_in].
                let stacked = |name: String, n_in, rows| TensorPlan {
                    stack: x.count,
                    ..plan(name, n_in, rows * x.count)
                };
                t.extend([
                    TensorPlan {
                        kind: Values::VariedMatrix,
                        ..plan(blk("ffn_gate_inp"), e, x.count)
                    },
                    stacked(blk("ffn_gate_exps"), e, x.n_ff),
                    stacked(blk("ffn_up_exps"), e, x.n_ff),
                    stacked(blk("ffn_down_exps"), x.n_ff, e),
                ]);
            } else if fused {
                t.push(plan(blk("ffn_up"), e, 2 * ff));
                t.push(plan(blk("ffn_down"), ff, e));
            } else {
                t.extend([plan(blk("ffn_gate"), e, ff), plan(blk("ffn_up"), e, ff)]);
                t.push(plan(blk("ffn_down"), ff, e));
            }
            if self.family.sandwich() {
                t.push(varied(blk("post_ffw_norm"), e, Values::VariedGain));
            }
        }
        t.push(plan("output_norm.weight".into(), e, 1));
        if !self.tied_embeddings {
            t.push(plan("output.weight".into(), e, v));
        }
        t
    }
}

/// One tensor to write: `n_out` rows of `n_in` values; a vector when `n_out` is 1.
pub(super) struct TensorPlan {
    pub name: String,
    pub n_in: usize,
    pub n_out: usize,
    /// Matrices stacked in a 3-dimensional tensor [stack, n_out / stack, n_in] (experts).
    pub stack: usize,
    pub kind: Values,
}

/// What a tensor holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Values {
    Matrix,
    /// A matrix whose every row is drawn, from a seed of its own without one.
    VariedMatrix,
    /// A norm gain over the model's width: ones.
    Gain,
    /// A projection's bias: uniform in ±0.5 with a seed, else zeros.
    Bias,
    /// A norm gain that varies (per-head and post-norms): uniform in 0.5..1.5 with a seed,
    /// else ones.
    VariedGain,
}

impl TensorPlan {
    /// Vectors (norm gains) are F32, as converters write them; matrices are in `format`.
    pub fn format(&self, format: Format) -> Format {
        if self.n_out == 1 {
            Format::F32
        } else {
            format
        }
    }
}
