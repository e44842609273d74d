//! An encoder (BERT) on the native executor. The texts of a batch run as one step: their
//! tokens stacked into one matrix, so each block's products read every weight row once for
//! the whole batch (the panel and `gemm` paths of [`crate::product`]), while attention runs
//! one task per text and head over that text's tokens only.

mod act;

use hearth_model::encoder::{
    check_batch, read_encoder, ClassifierHead, Encoder, EncoderConfig, EncoderInput,
    EncoderWeights, Norm,
};
use hearth_model::{ProgressFn, Result};
use hearth_models::{GgufFile, ResolvedModel};
use rayon::prelude::*;

use crate::act::{ActQ8, Activations};
use crate::dot::Kernels;
use crate::executor::{kernels_and_pool, CpuOptions};
use crate::interleave::ROWS;
use crate::isa::Isa;
use crate::product::{project, Input, Output};
use crate::weights::CpuProjection;

pub struct NativeEncoder {
    config: EncoderConfig,
    kernels: Kernels,
    pool: rayon::ThreadPool,
    mode: Activations,
    weights: EncoderWeights<CpuProjection>,
}

/// A step's buffers.
#[derive(Default)]
struct Work {
    act: ActQ8,
    transposed: Vec<f32>,
}

impl NativeEncoder {
    /// Loads an encoder; of `options`, the threads, instruction set and activations apply.
    pub fn load(
        file: &GgufFile,
        model: &ResolvedModel,
        options: CpuOptions,
        progress: &mut ProgressFn,
    ) -> Result<Self> {
        let config = EncoderConfig::from_resolved(file, model)?;
        let (kernels, pool) = kernels_and_pool(&options)?;
        let mode = options.activations;
        let weights = read_encoder(file, model, &config, progress)?;
        let weights = pool.install(|| {
            weights.map_matrices(|p| CpuProjection::for_kernels(&kernels, mode, p, ROWS))
        });
        Ok(Self {
            config,
            kernels,
            pool,
            mode,
            weights,
        })
    }

    /// The instruction set the kernels use.
    pub fn isa(&self) -> Isa {
        self.kernels.isa()
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// `x` ([tokens, cols]) times `w`'s rows transposed, plus `bias`.
    fn linear(
        &self,
        w: &CpuProjection,
        bias: &[f32],
        x: &[f32],
        cols: usize,
        work: &mut Work,
    ) -> Vec<f32> {
        let rows = w.rows();
        let n = x.len() / cols;
        let mut y = vec![0f32; n * rows];
        let mut input = Input::new(x, cols, &mut work.act, self.mode);
        let out = Output {
            out: &mut y,
            stride: rows,
            col0: 0,
        };
        project(&self.kernels, w, &mut input, out, &mut work.transposed);
        for row in y.chunks_exact_mut(rows) {
            for (v, b) in row.iter_mut().zip(bias) {
                *v += b;
            }
        }
        y
    }

    fn forward(&self, batch: &[EncoderInput]) -> Vec<Vec<f32>> {
        let c = &self.config;
        let w = &self.weights;
        let e = c.n_embd;
        let total: usize = batch.iter().map(|b| b.tokens.len()).sum();
        let mut x = vec![0f32; total * e];
        // Where each text's tokens start in the stacked rows.
        let mut starts = Vec::with_capacity(batch.len() + 1);
        let mut row = 0;
        for input in batch {
            starts.push(row);
            for (i, &t) in input.tokens.iter().enumerate() {
                let ty = input.types.get(i).copied().unwrap_or(0);
                w.embed_into(c, t, i, ty, &mut x[row * e..(row + 1) * e]);
                row += 1;
            }
        }
        starts.push(row);
        layernorm(&mut x, &w.embd_norm, e, c.norm_eps);
        let mut work = Work::default();
        for l in &w.layers {
            let qkv = self.linear(&l.wqkv, &l.qkv_bias, &x, e, &mut work);
            let attn = attention(c, &qkv, &starts);
            let o = self.linear(&l.wo, &l.wo_bias, &attn, e, &mut work);
            add(&mut x, &o);
            layernorm(&mut x, &l.attn_norm, e, c.norm_eps);
            let mut up = self.linear(&l.up, &l.up_bias, &x, e, &mut work);
            up.par_chunks_mut(c.n_ff)
                .for_each(|row| act::apply(c.act, row));
            let down = self.linear(&l.down, &l.down_bias, &up, c.n_ff, &mut work);
            add(&mut x, &down);
            layernorm(&mut x, &l.ffn_norm, e, c.norm_eps);
        }
        starts
            .windows(2)
            .map(|s| x[s[0] * e..s[1] * e].to_vec())
            .collect()
    }
}

impl Encoder for NativeEncoder {
    fn config(&self) -> &EncoderConfig {
        &self.config
    }

    fn head(&self) -> Option<&ClassifierHead> {
        self.weights.head.as_ref()
    }

    fn encode(&mut self, batch: &[EncoderInput]) -> Result<Vec<Vec<f32>>> {
        check_batch(&self.config, batch)?;
        Ok(self.pool.install(|| self.forward(batch)))
    }
}

/// Full attention within each text: one task per text and head, each writing its head's
/// columns of its text's rows.
fn attention(c: &EncoderConfig, qkv: &[f32], starts: &[usize]) -> Vec<f32> {
    let (e, hd, q3) = (c.n_embd, c.head_dim, c.qkv_dim());
    let scale = 1.0 / (hd as f32).sqrt();
    let tasks: Vec<(usize, usize)> = (0..starts.len() - 1)
        .flat_map(|t| (0..c.n_head).map(move |h| (t, h)))
        .collect();
    let outs: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(t, h)| {
            let (first, n) = (starts[t], starts[t + 1] - starts[t]);
            let at = |i: usize, part: usize| {
                let s = (first + i) * q3 + part * e + h * hd;
                &qkv[s..s + hd]
            };
            let mut out = vec![0f32; n * hd];
            let mut scores = vec![0f32; n];
            for i in 0..n {
                let q = at(i, 0);
                for (j, s) in scores.iter_mut().enumerate() {
                    *s = scale * q.iter().zip(at(j, 1)).map(|(a, b)| a * b).sum::<f32>();
                }
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let o = &mut out[i * hd..(i + 1) * hd];
                for (j, &p) in scores.iter().enumerate() {
                    let p = p / sum;
                    for (a, &v) in o.iter_mut().zip(at(j, 2)) {
                        *a += p * v;
                    }
                }
            }
            out
        })
        .collect();
    let rows = starts.last().copied().unwrap_or(0);
    let mut attn = vec![0f32; rows * e];
    for (&(t, h), out) in tasks.iter().zip(&outs) {
        for (i, o) in out.chunks_exact(hd).enumerate() {
            let r = starts[t] + i;
            attn[r * e + h * hd..r * e + (h + 1) * hd].copy_from_slice(o);
        }
    }
    attn
}

/// LayerNorm of each row of `x` in place, statistics in f64.
fn layernorm(x: &mut [f32], norm: &Norm<Vec<f32>>, n: usize, eps: f32) {
    x.par_chunks_mut(n).for_each(|row| {
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = (1.0 / (var + eps as f64).sqrt()) as f32;
        let mean = mean as f32;
        for ((v, &g), &b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
            *v = (*v - mean) * inv * g + b;
        }
    });
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
