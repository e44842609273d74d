//! An encoder's forward pass in plain f32 (BERT): each text on its own, every token
//! attending to every token of its text, LayerNorm after each residual add. The oracle the
//! native executor's and the devices' encoders are tested against.

use hearth_model::encoder::{
    check_batch, read_encoder, ClassifierHead, Encoder, EncoderConfig, EncoderInput,
    EncoderWeights, Norm,
};
use hearth_model::{ProgressFn, Result};
use hearth_models::{GgufFile, ResolvedModel};

use crate::matmul::matmul;
use crate::ops::{layernorm, softmax};

pub struct RefEncoder {
    config: EncoderConfig,
    /// Block matrices dequantized once.
    weights: EncoderWeights<Vec<f32>>,
}

impl RefEncoder {
    pub fn load(file: &GgufFile, model: &ResolvedModel, progress: &mut ProgressFn) -> Result<Self> {
        let config = EncoderConfig::from_resolved(file, model)?;
        let weights = read_encoder(file, model, &config, progress)?;
        Ok(Self {
            weights: weights.map_matrices(|p| p.to_f32()),
            config,
        })
    }

    fn encode_one(&self, input: &EncoderInput) -> Vec<f32> {
        let c = &self.config;
        let w = &self.weights;
        let (e, n) = (c.n_embd, input.tokens.len());
        let norm = |x: &[f32], g: &Norm<Vec<f32>>| layernorm(x, &g.weight, &g.bias, e, c.norm_eps);
        let mut x = vec![0f32; n * e];
        for (i, (&t, row)) in input.tokens.iter().zip(x.chunks_exact_mut(e)).enumerate() {
            let ty = input.types.get(i).copied().unwrap_or(0);
            w.embed_into(c, t, i, ty, row);
        }
        x = norm(&x, &w.embd_norm);
        let (hd, heads) = (c.head_dim, c.n_head);
        let scale = 1.0 / (hd as f32).sqrt();
        for l in &w.layers {
            let qkv = with_bias(matmul(&x, &l.wqkv, c.qkv_dim(), e), &l.qkv_bias);
            let q3 = c.qkv_dim();
            let mut attn = vec![0f32; n * e];
            for h in 0..heads {
                let at = |t: usize, part: usize| {
                    let start = t * q3 + part * e + h * hd;
                    &qkv[start..start + hd]
                };
                let mut scores = vec![0f32; n * n];
                for i in 0..n {
                    for j in 0..n {
                        scores[i * n + j] = crate::matmul::dot(at(i, 0), at(j, 1));
                    }
                }
                let probs = softmax(&scores, n, scale);
                for i in 0..n {
                    let out = &mut attn[i * e + h * hd..i * e + (h + 1) * hd];
                    for j in 0..n {
                        let p = probs[i * n + j];
                        for (o, &v) in out.iter_mut().zip(at(j, 2)) {
                            *o += p * v;
                        }
                    }
                }
            }
            let o = with_bias(matmul(&attn, &l.wo, e, e), &l.wo_bias);
            add(&mut x, &o);
            x = norm(&x, &l.attn_norm);
            let mut up = with_bias(matmul(&x, &l.up, c.n_ff, e), &l.up_bias);
            c.act.apply(&mut up);
            let down = with_bias(matmul(&up, &l.down, e, c.n_ff), &l.down_bias);
            add(&mut x, &down);
            x = norm(&x, &l.ffn_norm);
        }
        x
    }
}

impl Encoder for RefEncoder {
    fn config(&self) -> &EncoderConfig {
        &self.config
    }

    fn head(&self) -> Option<&ClassifierHead> {
        self.weights.head.as_ref()
    }

    fn encode(&mut self, batch: &[EncoderInput]) -> Result<Vec<Vec<f32>>> {
        check_batch(&self.config, batch)?;
        Ok(batch.iter().map(|input| self.encode_one(input)).collect())
    }
}

/// Each row of `y` plus `bias`.
fn with_bias(mut y: Vec<f32>, bias: &[f32]) -> Vec<f32> {
    for row in y.chunks_exact_mut(bias.len()) {
        add(row, bias);
    }
    y
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
