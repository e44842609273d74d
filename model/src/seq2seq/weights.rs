//! An encoder-decoder's weights: the shared embeddings (packed as the file holds them), each
//! stack's blocks with q/k/v fused into one projection and a gated MLP's gate and up into
//! another, each block's relative position bias table, the decoder blocks' cross-attention,
//! the two final norms and the output.

use std::collections::HashMap;

use hearth_models::spec::{LayerTensors, MlpTensors, QkvTensors};
use hearth_models::{GgufFile, ResolvedModel};

use super::config::Seq2SeqConfig;
use crate::error::Result;
use crate::matrix::{Matrix, Projection};
use crate::weights::{ProgressFn, TensorReader};

/// A decoder block's attention over the encoder's output.
pub struct CrossWeights<M> {
    /// RMSNorm gain before it.
    pub norm: Vec<f32>,
    /// [attn_dim, n_embd], over the decoder's state.
    pub wq: M,
    /// [2 attn_dim, n_embd]: k rows then v rows, over the encoder's output.
    pub wkv: M,
    /// [n_embd, attn_dim]
    pub wo: M,
}

/// One block of either stack: `M` holds a matrix ([out, in]).
pub struct Seq2SeqBlock<M> {
    pub attn_norm: Vec<f32>,
    /// [3 attn_dim, n_embd]: q rows, k rows, v rows.
    pub wqkv: M,
    /// [n_embd, attn_dim]
    pub wo: M,
    /// [buckets, n_head]: the block's own table, or the first block's.
    pub relative_bias: Vec<f32>,
    /// The decoder's blocks only.
    pub cross: Option<CrossWeights<M>>,
    pub ffn_norm: Vec<f32>,
    /// [2 n_ff, n_embd] gate rows then up rows when gated, else [n_ff, n_embd].
    pub gate_up: M,
    /// [n_embd, n_ff]
    pub down: M,
}

impl<M> Seq2SeqBlock<M> {
    fn map_matrices<M2>(self, f: &mut impl FnMut(M) -> M2) -> Seq2SeqBlock<M2> {
        Seq2SeqBlock {
            attn_norm: self.attn_norm,
            wqkv: f(self.wqkv),
            wo: f(self.wo),
            relative_bias: self.relative_bias,
            cross: self.cross.map(|c| CrossWeights {
                norm: c.norm,
                wq: f(c.wq),
                wkv: f(c.wkv),
                wo: f(c.wo),
            }),
            ffn_norm: self.ffn_norm,
            gate_up: f(self.gate_up),
            down: f(self.down),
        }
    }
}

/// The whole model as the file holds it.
pub struct Seq2SeqWeights<M> {
    /// [n_vocab, n_embd], rows gathered one by one; both stacks read it.
    pub token_embd: Matrix,
    pub encoder: Vec<Seq2SeqBlock<M>>,
    pub encoder_norm: Vec<f32>,
    pub decoder: Vec<Seq2SeqBlock<M>>,
    pub decoder_norm: Vec<f32>,
    /// [n_vocab, n_embd]: the output matrix, or the embeddings where they are tied.
    pub output: M,
}

impl<M> Seq2SeqWeights<M> {
    /// The same weights with their matrices held otherwise.
    pub fn map_matrices<M2>(self, mut f: impl FnMut(M) -> M2) -> Seq2SeqWeights<M2> {
        Seq2SeqWeights {
            token_embd: self.token_embd,
            encoder: self
                .encoder
                .into_iter()
                .map(|b| b.map_matrices(&mut f))
                .collect(),
            encoder_norm: self.encoder_norm,
            decoder: self
                .decoder
                .into_iter()
                .map(|b| b.map_matrices(&mut f))
                .collect(),
            decoder_norm: self.decoder_norm,
            output: f(self.output),
        }
    }
}

/// Reads an encoder-decoder's weights (`config` from [`Seq2SeqConfig::from_resolved`]).
pub fn read_seq2seq<'a>(
    file: &'a GgufFile,
    model: &'a ResolvedModel,
    config: &Seq2SeqConfig,
    progress: &'a mut ProgressFn<'a>,
) -> Result<Seq2SeqWeights<Projection>> {
    let t = &model.tensors;
    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    let mut r = TensorReader::new(file, &names, progress);
    let c = config;
    let Some(s) = &t.seq2seq else {
        return Err(r.fail("enc.output_norm.weight", "no encoder in the model".into()));
    };
    let token_embd = r.matrix(&t.token_embd, c.n_vocab, c.n_embd)?;
    // Blocks share the first block's table unless they have their own: read each once.
    let mut tables: HashMap<&str, Vec<f32>> = HashMap::new();
    let relative = s
        .encoder_relative_bias
        .iter()
        .chain(&s.decoder_relative_bias);
    for name in relative {
        if !tables.contains_key(name.as_str()) {
            tables.insert(name, r.vector(name, c.buckets, c.n_head)?);
        }
    }
    let table = |names: &[String], i: usize| match names.get(i) {
        Some(name) => tables[name.as_str()].clone(),
        None => vec![0.0; c.buckets * c.n_head],
    };
    let mut encoder = Vec::with_capacity(s.encoder_layers.len());
    for (i, lt) in s.encoder_layers.iter().enumerate() {
        let relative_bias = table(&s.encoder_relative_bias, i);
        encoder.push(block(&mut r, c, lt, relative_bias, None)?);
    }
    let mut decoder = Vec::with_capacity(t.layers.len());
    for (i, lt) in t.layers.iter().enumerate() {
        let relative_bias = table(&s.decoder_relative_bias, i);
        let ct = &s.cross[i];
        let (a, e) = (c.attn_dim(), c.n_embd);
        let cross = CrossWeights {
            norm: r.vector(&ct.norm.weight, 1, e)?,
            wq: r.matrix(&ct.q.weight, a, e)?.into(),
            wkv: Projection::fuse(vec![
                r.matrix(&ct.k.weight, a, e)?,
                r.matrix(&ct.v.weight, a, e)?,
            ]),
            wo: r.matrix(&ct.output.weight, e, a)?.into(),
        };
        decoder.push(block(&mut r, c, lt, relative_bias, Some(cross))?);
    }
    let encoder_norm = r.vector(&s.encoder_norm.weight, 1, c.n_embd)?;
    let decoder_norm = match &t.output_norm {
        Some(n) => r.vector(&n.weight, 1, c.n_embd)?,
        None => return Err(r.fail("dec.output_norm.weight", "missing".into())),
    };
    let output = match t.tied_embeddings {
        true => token_embd.clone(),
        false => r.matrix(&t.output, c.n_vocab, c.n_embd)?,
    };
    r.finish()?;
    Ok(Seq2SeqWeights {
        token_embd,
        encoder,
        encoder_norm,
        decoder,
        decoder_norm,
        output: output.into(),
    })
}

fn block(
    r: &mut TensorReader,
    c: &Seq2SeqConfig,
    lt: &LayerTensors,
    relative_bias: Vec<f32>,
    cross: Option<CrossWeights<Projection>>,
) -> Result<Seq2SeqBlock<Projection>> {
    let (a, e, ff) = (c.attn_dim(), c.n_embd, c.n_ff);
    let QkvTensors::Separate { q, k, v } = &lt.qkv else {
        return Err(r.fail(&lt.attn_output.weight, "a fused q/k/v".into()));
    };
    let MlpTensors::Dense { gate, up, down } = &lt.mlp else {
        return Err(r.fail(
            &lt.attn_output.weight,
            "experts in an encoder-decoder".into(),
        ));
    };
    let mut gate_up: Vec<Matrix> = Vec::with_capacity(2);
    if let Some(g) = gate {
        gate_up.push(r.matrix(&g.weight, ff, e)?);
    }
    gate_up.push(r.matrix(&up.weight, ff, e)?);
    Ok(Seq2SeqBlock {
        attn_norm: r.vector(&lt.attn_norm.weight, 1, e)?,
        wqkv: Projection::fuse(vec![
            r.matrix(&q.weight, a, e)?,
            r.matrix(&k.weight, a, e)?,
            r.matrix(&v.weight, a, e)?,
        ]),
        wo: r.matrix(&lt.attn_output.weight, e, a)?.into(),
        relative_bias,
        cross,
        ffn_norm: r.vector(&lt.ffn_norm.weight, 1, e)?,
        gate_up: Projection::fuse(gate_up),
        down: r.matrix(&down.weight, e, ff)?.into(),
    })
}
