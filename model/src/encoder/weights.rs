//! An encoder's weights: the embeddings (tokens packed as the file holds them, positions and
//! token types in f32), their norm, and per block q/k/v fused into one projection, the
//! output, up and down projections, each with its bias, and the two post-norms.

use hearth_models::spec::{Linear, MlpTensors, NormTensors, QkvTensors};
use hearth_models::{GgufFile, ResolvedModel};

use super::config::EncoderConfig;
use crate::error::Result;
use crate::matrix::{Matrix, Projection};
use crate::weights::{ProgressFn, TensorReader};

/// A LayerNorm's gain and bias.
#[derive(Clone, Debug)]
pub struct Norm<V> {
    pub weight: V,
    pub bias: V,
}

/// One block: `M` holds a matrix ([out, in]), `V` a vector.
pub struct EncoderLayer<M, V> {
    /// [3 n_embd, n_embd]: q rows, k rows, v rows.
    pub wqkv: M,
    /// [3 n_embd]
    pub qkv_bias: V,
    /// [n_embd, n_embd]
    pub wo: M,
    pub wo_bias: V,
    /// After the attention's residual add.
    pub attn_norm: Norm<V>,
    /// [n_ff, n_embd]
    pub up: M,
    pub up_bias: V,
    /// [n_embd, n_ff]
    pub down: M,
    pub down_bias: V,
    /// After the MLP's residual add.
    pub ffn_norm: Norm<V>,
}

impl<M, V> EncoderLayer<M, V> {
    /// The same block with its matrices held otherwise.
    pub fn map_matrices<M2>(self, mut f: impl FnMut(M) -> M2) -> EncoderLayer<M2, V> {
        EncoderLayer {
            wqkv: f(self.wqkv),
            qkv_bias: self.qkv_bias,
            wo: f(self.wo),
            wo_bias: self.wo_bias,
            attn_norm: self.attn_norm,
            up: f(self.up),
            up_bias: self.up_bias,
            down: f(self.down),
            down_bias: self.down_bias,
            ffn_norm: self.ffn_norm,
        }
    }
}

/// A cross-encoder's head over the first token's state, in f32 (it is small).
pub struct ClassifierHead {
    /// [n_embd, n_embd] and its bias, then tanh (BERT's pooler), where the model has it.
    pub dense: Option<(Vec<f32>, Vec<f32>)>,
    /// [n_labels, n_embd] and its bias.
    pub out: (Vec<f32>, Vec<f32>),
}

impl ClassifierHead {
    /// The labels' logits for a first token's state `x` ([n_embd]).
    pub fn classify(&self, x: &[f32]) -> Vec<f32> {
        let linear = |(w, b): &(Vec<f32>, Vec<f32>), x: &[f32]| -> Vec<f32> {
            w.chunks_exact(x.len())
                .zip(b)
                .map(|(row, &b)| {
                    let dot: f64 = row.iter().zip(x).map(|(&a, &v)| a as f64 * v as f64).sum();
                    (dot + b as f64) as f32
                })
                .collect()
        };
        match &self.dense {
            Some(dense) => {
                let pooled: Vec<f32> = linear(dense, x).into_iter().map(f32::tanh).collect();
                linear(&self.out, &pooled)
            }
            None => linear(&self.out, x),
        }
    }
}

/// The whole encoder as the file holds it.
pub struct EncoderWeights<M> {
    /// [n_vocab, n_embd], rows gathered one by one.
    pub token_embd: Matrix,
    /// [n_positions, n_embd]
    pub position_embd: Vec<f32>,
    /// [n_token_types, n_embd] (one row of zeros where the model has none).
    pub token_types: Vec<f32>,
    pub embd_norm: Norm<Vec<f32>>,
    pub layers: Vec<EncoderLayer<M, Vec<f32>>>,
    /// A cross-encoder's classifier, where the model has one.
    pub head: Option<ClassifierHead>,
}

impl<M> EncoderWeights<M> {
    /// Token `t`'s embedding at position `pos` with segment `ty`, before the embedding norm.
    pub fn embed_into(&self, c: &EncoderConfig, t: u32, pos: usize, ty: u32, out: &mut [f32]) {
        let e = c.n_embd;
        out.copy_from_slice(&self.token_embd.row_range(t as usize, 1).to_f32());
        let p = &self.position_embd[pos * e..(pos + 1) * e];
        let s = &self.token_types[ty as usize * e..(ty as usize + 1) * e];
        for ((o, &p), &s) in out.iter_mut().zip(p).zip(s) {
            *o += p + s;
        }
    }

    /// The same weights with their block matrices held otherwise.
    pub fn map_matrices<M2>(self, mut f: impl FnMut(M) -> M2) -> EncoderWeights<M2> {
        EncoderWeights {
            token_embd: self.token_embd,
            position_embd: self.position_embd,
            token_types: self.token_types,
            embd_norm: self.embd_norm,
            head: self.head,
            layers: self
                .layers
                .into_iter()
                .map(|l| l.map_matrices(&mut f))
                .collect(),
        }
    }
}

/// Reads an encoder's weights (`config` from [`EncoderConfig::from_resolved`]).
pub fn read_encoder<'a>(
    file: &'a GgufFile,
    model: &'a ResolvedModel,
    config: &EncoderConfig,
    progress: &'a mut ProgressFn<'a>,
) -> Result<EncoderWeights<Projection>> {
    let t = &model.tensors;
    let names = tensor_names(model);
    let mut r = TensorReader::new(file, &names, progress);
    let c = config;
    let e = c.n_embd;
    let missing = |r: &TensorReader, what: &str| r.fail(what, "missing from the model".into());
    let token_embd = r.matrix(&t.token_embd, c.n_vocab, e)?;
    let position_embd = match &t.position_embd {
        Some(name) => r.vector(name, c.n_positions, e)?,
        None => return Err(missing(&r, "position_embd")),
    };
    let token_types = match &t.token_types {
        Some(name) => r.vector(name, c.n_token_types, e)?,
        None => vec![0.0; e],
    };
    let embd_norm = match &t.embd_norm {
        Some(n) => norm(&mut r, n, e)?,
        None => return Err(missing(&r, "token_embd_norm")),
    };
    let mut layers = Vec::with_capacity(c.n_layer);
    for (l, lt) in t.layers.iter().enumerate() {
        let QkvTensors::Separate { q, k, v } = &lt.qkv else {
            return Err(r.fail(&format!("blk.{l}.attn_qkv"), "a fused q/k/v".into()));
        };
        let MlpTensors::Dense {
            gate: None,
            up,
            down,
        } = &lt.mlp
        else {
            return Err(r.fail(&format!("blk.{l}.ffn_up"), "a gated MLP or experts".into()));
        };
        let mut qkv_bias = Vec::with_capacity(3 * e);
        let mut parts = Vec::with_capacity(3);
        for p in [q, k, v] {
            parts.push(r.matrix(&p.weight, c.attn_dim(), e)?);
            qkv_bias.extend(bias(&mut r, p, c.attn_dim())?);
        }
        layers.push(EncoderLayer {
            wqkv: Projection::fuse(parts),
            qkv_bias,
            wo: r.matrix(&lt.attn_output.weight, e, c.attn_dim())?.into(),
            wo_bias: bias(&mut r, &lt.attn_output, e)?,
            attn_norm: norm(&mut r, &lt.attn_norm, e)?,
            up: r.matrix(&up.weight, c.n_ff, e)?.into(),
            up_bias: bias(&mut r, up, c.n_ff)?,
            down: r.matrix(&down.weight, e, c.n_ff)?.into(),
            down_bias: bias(&mut r, down, e)?,
            ffn_norm: norm(&mut r, &lt.ffn_norm, e)?,
        });
    }
    let head = match (&t.cls_output, c.n_labels) {
        (Some(out), Some(labels)) => {
            let dense = match &t.cls {
                Some(l) => Some((r.vector(&l.weight, e, e)?, bias(&mut r, l, e)?)),
                None => None,
            };
            let out = (
                r.vector(&out.weight, labels, e)?,
                bias(&mut r, out, labels)?,
            );
            Some(ClassifierHead { dense, out })
        }
        _ => None,
    };
    r.finish()?;
    Ok(EncoderWeights {
        token_embd,
        position_embd,
        token_types,
        embd_norm,
        layers,
        head,
    })
}

fn norm(r: &mut TensorReader, n: &NormTensors, width: usize) -> Result<Norm<Vec<f32>>> {
    let weight = r.vector(&n.weight, 1, width)?;
    let bias = match &n.bias {
        Some(b) => r.vector(b, 1, width)?,
        None => vec![0.0; width],
    };
    Ok(Norm { weight, bias })
}

fn bias(r: &mut TensorReader, l: &Linear, rows: usize) -> Result<Vec<f32>> {
    match &l.bias {
        Some(b) => r.vector(b, 1, rows),
        None => Ok(vec![0.0; rows]),
    }
}

fn norms(n: &NormTensors) -> [Option<&str>; 2] {
    [Some(n.weight.as_str()), n.bias.as_deref()]
}

fn linear(l: &Linear) -> [Option<&str>; 2] {
    [Some(l.weight.as_str()), l.bias.as_deref()]
}

/// Every tensor the encoder reads, for progress.
fn tensor_names(model: &ResolvedModel) -> Vec<&str> {
    let t = &model.tensors;
    let mut names = vec![t.token_embd.as_str()];
    names.extend(t.position_embd.as_deref());
    names.extend(t.token_types.as_deref());
    if let Some(n) = &t.embd_norm {
        names.extend(norms(n).into_iter().flatten());
    }
    for l in [&t.cls, &t.cls_output].into_iter().flatten() {
        names.extend(linear(l).into_iter().flatten());
    }
    for l in &t.layers {
        if let QkvTensors::Separate { q, k, v } = &l.qkv {
            for p in [q, k, v] {
                names.extend(linear(p).into_iter().flatten());
            }
        }
        names.extend(linear(&l.attn_output).into_iter().flatten());
        names.extend(norms(&l.attn_norm).into_iter().flatten());
        names.extend(norms(&l.ffn_norm).into_iter().flatten());
        if let MlpTensors::Dense { up, down, .. } = &l.mlp {
            names.extend(linear(up).into_iter().flatten());
            names.extend(linear(down).into_iter().flatten());
        }
    }
    names
}
