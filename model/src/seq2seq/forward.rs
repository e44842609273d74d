//! An encoder-decoder's forward pass on the host, over whatever matrix products an executor
//! has ([`Product`]): the reference's f32 ones or the native CPU executor's packed ones. The
//! attention, norms and activations are f32, as transformers computes them.

use std::sync::Arc;

use hearth_models::spec::Activation;

use super::buckets;
use super::cache::PagedCache;
use super::config::Seq2SeqConfig;
use super::weights::{Seq2SeqBlock, Seq2SeqWeights};
use super::{check_tokens, Seq2Seq};
use crate::backend::Logits;
use crate::error::{Error, Result};
use crate::ops::{gelu, rmsnorm};

/// A matrix [rows, cols] an executor multiplies by.
pub trait Product: Send + Sync {
    /// y [n, rows] = x [n, cols] times the matrix transposed.
    fn product(&self, x: &[f32], n: usize) -> Vec<f32>;
}

/// A decoder row's cross-attention keys and values over its encoder output, per block
/// ([n_mem, 2 attn_dim]: k then v), shared between forks.
struct Cross {
    kv: Vec<Vec<f32>>,
    n_mem: usize,
}

/// Decoder rows: enough for a beam search of 16 beams and their forks.
pub const DECODER_ROWS: usize = 32;

/// An encoder-decoder with its decoder rows.
pub struct Seq2SeqModel<M> {
    config: Seq2SeqConfig,
    weights: Seq2SeqWeights<M>,
    /// Each row's encoder output, where the row holds a sequence.
    cross: Vec<Option<Arc<Cross>>>,
    cache: PagedCache,
}

impl<M: Product> Seq2SeqModel<M> {
    /// The model with [`DECODER_ROWS`] decoder rows of up to
    /// [`decoder_positions`](Seq2SeqConfig::decoder_positions) positions each.
    pub fn new(config: Seq2SeqConfig, weights: Seq2SeqWeights<M>) -> Self {
        let cache = PagedCache::new(
            weights.decoder.len(),
            config.n_head,
            config.head_dim,
            DECODER_ROWS,
            config.decoder_positions(),
        );
        Self {
            config,
            weights,
            cross: (0..DECODER_ROWS).map(|_| None).collect(),
            cache,
        }
    }

    /// Blocks of the decoder's paged cache in use.
    pub fn blocks_used(&self) -> usize {
        self.cache.blocks_used()
    }

    pub fn weights(&self) -> &Seq2SeqWeights<M> {
        &self.weights
    }

    fn embed(&self, tokens: &[u32]) -> Vec<f32> {
        let e = self.config.n_embd;
        let mut x = Vec::with_capacity(tokens.len() * e);
        for &t in tokens {
            x.extend(self.weights.token_embd.row_range(t as usize, 1).to_f32());
        }
        x
    }

    fn cross(&self, row: usize) -> Result<Arc<Cross>> {
        self.cross
            .get(row)
            .cloned()
            .flatten()
            .ok_or_else(|| Error::options("row", format!("decoder row {row} has no sequence")))
    }

    fn check_row(&self, row: usize) -> Result<()> {
        match row < DECODER_ROWS {
            true => Ok(()),
            false => Err(Error::options(
                "row",
                format!("decoder row {row}: the model has {DECODER_ROWS}"),
            )),
        }
    }

    /// The MLP's output for `h` ([n, n_embd]).
    fn mlp(&self, b: &Seq2SeqBlock<M>, h: &[f32], n: usize) -> Vec<f32> {
        let (ff, mlp) = (self.config.n_ff, self.config.mlp);
        let gu = b.gate_up.product(h, n);
        let mut hidden = Vec::with_capacity(n * ff);
        for row in gu.chunks_exact(gu.len() / n) {
            let (gate, up) = row.split_at(if mlp.gated { ff } else { 0 });
            let acted = activate(mlp.act, if mlp.gated { gate } else { up });
            match mlp.gated {
                true => hidden.extend(acted.iter().zip(up).map(|(a, u)| a * u)),
                false => hidden.extend(acted),
            }
        }
        b.down.product(&hidden, n)
    }

    fn norm(&self, x: &[f32], gain: &[f32]) -> Vec<f32> {
        rmsnorm(x, gain, self.config.n_embd, self.config.norm_eps)
    }
}

impl<M: Product> Seq2Seq for Seq2SeqModel<M> {
    fn config(&self) -> &Seq2SeqConfig {
        &self.config
    }

    fn encode(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        let c = &self.config;
        check_tokens(c, "input", tokens)?;
        let (n, a) = (tokens.len(), c.attn_dim());
        let mut x = self.embed(tokens);
        for b in &self.weights.encoder {
            let h = self.norm(&x, &b.attn_norm);
            let qkv = b.wqkv.product(&h, n);
            let bias = buckets::bias(&b.relative_bias, c.n_head, 0, n, n, true, c.max_distance);
            let heads = Heads::of(c);
            let ctx = heads.attend(
                (&qkv, 3 * a, 0),
                (&qkv, 3 * a, a),
                (&qkv, 3 * a, 2 * a),
                n,
                Some(&bias),
                None,
            );
            add(&mut x, &b.wo.product(&ctx, n));
            let h = self.norm(&x, &b.ffn_norm);
            add(&mut x, &self.mlp(b, &h, n));
        }
        Ok(self.norm(&x, &self.weights.encoder_norm))
    }

    fn begin(&mut self, row: usize, memory: &[f32]) -> Result<()> {
        let c = &self.config;
        let n_mem = memory.len() / c.n_embd;
        if n_mem == 0 || memory.len() % c.n_embd != 0 {
            return Err(Error::options(
                "memory",
                format!("{} values are no whole encoder states", memory.len()),
            ));
        }
        let cross = self
            .weights
            .decoder
            .iter()
            .map(|b| match &b.cross {
                Some(cw) => cw.wkv.product(memory, n_mem),
                None => Vec::new(),
            })
            .collect();
        self.check_row(row)?;
        self.cache.clear(row);
        self.cross[row] = Some(Arc::new(Cross { kv: cross, n_mem }));
        Ok(())
    }

    fn decode(&mut self, row: usize, tokens: &[u32], logits: Logits) -> Result<Vec<f32>> {
        check_tokens(&self.config, "tokens", tokens)?;
        let cross = self.cross(row)?;
        let p0 = self.cache.len(row);
        self.cache.append(row, tokens.len())?;
        let c = &self.config;
        let (n, a) = (tokens.len(), c.attn_dim());
        let heads = Heads::of(c);
        let mut x = self.embed(tokens);
        for (l, b) in self.weights.decoder.iter().enumerate() {
            let h = self.norm(&x, &b.attn_norm);
            let qkv = b.wqkv.product(&h, n);
            for (i, t) in qkv.chunks_exact(3 * a).enumerate() {
                self.cache.write(l, row, p0 + i, &t[a..2 * a], &t[2 * a..]);
            }
            let (keys_so_far, values_so_far) = self.cache.gather(l, row);
            let keys = p0 + n;
            let bias = buckets::bias(
                &b.relative_bias,
                c.n_head,
                p0,
                n,
                keys,
                false,
                c.max_distance,
            );
            let ctx = heads.attend(
                (&qkv, 3 * a, 0),
                (&keys_so_far, a, 0),
                (&values_so_far, a, 0),
                keys,
                Some(&bias),
                Some(p0),
            );
            add(&mut x, &b.wo.product(&ctx, n));
            if let Some(cw) = &b.cross {
                let h = self.norm(&x, &cw.norm);
                let q = cw.wq.product(&h, n);
                let kv = &cross.kv[l];
                let ctx = heads.attend(
                    (&q, a, 0),
                    (kv, 2 * a, 0),
                    (kv, 2 * a, a),
                    cross.n_mem,
                    None,
                    None,
                );
                add(&mut x, &cw.wo.product(&ctx, n));
            }
            let h = self.norm(&x, &b.ffn_norm);
            add(&mut x, &self.mlp(b, &h, n));
        }
        let e = c.n_embd;
        let last = match logits {
            Logits::Last => &x[(n - 1) * e..],
            Logits::All => &x[..],
        };
        let mut h = self.norm(last, &self.weights.decoder_norm);
        if c.tied {
            let s = 1.0 / (e as f32).sqrt();
            h.iter_mut().for_each(|v| *v *= s);
        }
        Ok(self.weights.output.product(&h, h.len() / e))
    }

    fn fork(&mut self, src: usize, dst: usize) -> Result<()> {
        let cross = self.cross(src)?;
        self.check_row(dst)?;
        self.cache.fork(src, dst);
        self.cross[dst] = Some(cross);
        Ok(())
    }

    fn len(&self, row: usize) -> usize {
        match self.cross.get(row) {
            Some(Some(_)) => self.cache.len(row),
            _ => 0,
        }
    }

    fn end(&mut self, row: usize) {
        if row < DECODER_ROWS {
            self.cache.clear(row);
            self.cross[row] = None;
        }
    }

    fn rows(&self) -> usize {
        self.cache.rows()
    }
}

/// The attention's shape: heads, their width, the scale on scores.
struct Heads {
    n_head: usize,
    head_dim: usize,
    scale: f32,
}

impl Heads {
    fn of(c: &Seq2SeqConfig) -> Self {
        Self {
            n_head: c.n_head,
            head_dim: c.head_dim,
            scale: c.attn_scale,
        }
    }

    /// Each query row's attention over `n_keys` keys and values, per head. Each operand is
    /// (values, row stride, offset of head 0); `bias` is [n_head, queries, n_keys]; with
    /// `causal = Some(p0)`, query i (at position p0 + i) sees keys up to its own position.
    fn attend(
        &self,
        (q, qs, qo): (&[f32], usize, usize),
        (k, ks, ko): (&[f32], usize, usize),
        (v, vs, vo): (&[f32], usize, usize),
        n_keys: usize,
        bias: Option<&[f32]>,
        causal: Option<usize>,
    ) -> Vec<f32> {
        let (hd, nh) = (self.head_dim, self.n_head);
        let queries = q.len() / qs;
        let mut out = vec![0f32; queries * nh * hd];
        let mut scores = vec![0f32; n_keys];
        for i in 0..queries {
            let seen = causal.map_or(n_keys, |p0| (p0 + i + 1).min(n_keys));
            for h in 0..nh {
                let qh = &q[i * qs + qo + h * hd..][..hd];
                let mut max = f32::NEG_INFINITY;
                for (j, s) in scores[..seen].iter_mut().enumerate() {
                    let kh = &k[j * ks + ko + h * hd..][..hd];
                    let dot: f32 = qh.iter().zip(kh).map(|(a, b)| a * b).sum();
                    *s = dot * self.scale + bias.map_or(0.0, |b| b[(h * queries + i) * n_keys + j]);
                    max = max.max(*s);
                }
                let mut sum = 0f32;
                for s in &mut scores[..seen] {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let o = &mut out[i * nh * hd + h * hd..][..hd];
                for (j, &p) in scores[..seen].iter().enumerate() {
                    let vh = &v[j * vs + vo + h * hd..][..hd];
                    for (o, &x) in o.iter_mut().zip(vh) {
                        *o += p / sum * x;
                    }
                }
            }
        }
        out
    }
}

fn activate(act: Activation, x: &[f32]) -> Vec<f32> {
    match act {
        Activation::Gelu => gelu(x, true),
        Activation::GeluTanh => gelu(x, false),
        Activation::Relu => x.iter().map(|v| v.max(0.0)).collect(),
        Activation::Silu => x.iter().map(|&v| crate::ops::silu(v)).collect(),
        // Refused when the model is read (`Seq2SeqConfig`).
        Activation::SwigluOai => x.to_vec(),
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
