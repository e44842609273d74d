//! One step of the native executor: the sequences' tokens appended to their cache rows, every
//! layer over all of them at once (each product reads its weights once for the whole step),
//! and the logits each sequence asked for (or, where the executor holds the first layers of
//! a split model, the residual stream the next executor takes).

use super::attention::{self, Cache, TokenAt};
use super::NativeModel;
use super::{latent, mlp};
use crate::product::{project, Input, Output};
use hearth_model::kv::OutOfBlocks;
use hearth_model::{check_hidden, check_step, ops, Error, Logits, Result, SeqStep, StageOutput};

impl NativeModel {
    /// Appends each sequence's tokens to its row in one step over the layers held, entered
    /// by `hidden` where they do not start the model, and returns the logits each sequence
    /// asked for, in order, or the residual stream where they do not end it.
    pub fn step_stage(&mut self, seqs: &[SeqStep], hidden: Option<&[f32]>) -> Result<StageOutput> {
        check_hidden(&self.part, seqs, hidden, self.config.n_embd)?;
        let n: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        if n > self.chunk {
            return Err(Error::options(
                "tokens",
                format!("a step takes at most {} tokens, got {n}", self.chunk),
            ));
        }
        let shape = self.tables.shape();
        let mut needed = 0;
        for s in seqs {
            if s.row >= shape.rows {
                return Err(Error::options("row", format!("no cache row {}", s.row)));
            }
            if let Some(b) = s.beam {
                if b as usize / shape.n_ctx.max(1) >= shape.rows {
                    return Err(Error::options("beam", format!("no beam table at {b}")));
                }
            }
            check_step(&self.config, s.tokens, self.tables.len(s.row), shape.n_ctx)?;
            needed += self.tables.blocks_needed(s.row, s.tokens.len());
        }
        let free = self.tables.pool().free_blocks();
        if needed > free {
            return Err(OutOfBlocks { needed, free }.into());
        }
        let mut tokens = std::mem::take(&mut self.work.tokens);
        let mut ids = std::mem::take(&mut self.work.ids);
        tokens.clear();
        ids.clear();
        let kv_dim = self.config.n_head_kv * self.config.head_dim;
        for s in seqs {
            let len = self.tables.len(s.row);
            for (j, &id) in s.tokens.iter().enumerate() {
                ids.push(id);
                tokens.push(TokenAt {
                    row: s.row,
                    pos: len + j,
                    beam: s.beam.map(|b| b as usize / shape.n_ctx.max(1)),
                });
            }
            // Counted above, so this cannot run out.
            let copies = self.tables.append(s.row, s.tokens.len())?;
            self.tables.count_copies(copies.len());
            let v_dim = if shape.values_in_keys { 0 } else { kv_dim };
            for copy in copies {
                for store in &mut self.k {
                    store.copy_block(copy.src, copy.dst, kv_dim);
                }
                for store in &mut self.v {
                    store.copy_block(copy.src, copy.dst, v_dim);
                }
            }
        }
        let pool = self.pool.clone();
        pool.install(|| self.layers_over(&ids, &tokens, hidden));
        let out = match self.part.heads() {
            true => StageOutput::Logits(pool.install(|| self.logits(seqs))),
            false => StageOutput::Hidden(self.work.x[..n * self.config.n_embd].to_vec()),
        };
        self.work.tokens = tokens;
        self.work.ids = ids;
        Ok(out)
    }

    /// Runs the layers held over the step's tokens, from their embeddings or from `hidden`;
    /// the residual stream ends in `work.x`.
    fn layers_over(&mut self, ids: &[u32], tokens: &[TokenAt], hidden: Option<&[f32]>) {
        let c = &self.config;
        let (n, e) = (ids.len(), c.n_embd);
        let w = &mut self.work;
        w.x.resize(n * e, 0.0);
        match (hidden, &self.token_embd) {
            (Some(h), _) => w.x.copy_from_slice(h),
            (None, Some(embd)) => {
                let embd = &embd.matrix;
                let row_bytes = embd.data.len() / embd.rows.max(1);
                for (&id, x) in ids.iter().zip(w.x.chunks_mut(e)) {
                    let row = &embd.data[id as usize * row_bytes..][..row_bytes];
                    // Sizes come from the matrix; ids were checked against the vocabulary.
                    let _ = embd.format.dequantize(row, x);
                    if let Some(scale) = c.embd_scale {
                        x.iter_mut().for_each(|v| *v *= scale);
                    }
                }
            }
            // `check_hidden` let the step in: the part embeds, so it holds the embedding.
            (None, None) => {}
        }
        let k = &self.kernels;
        let hd = c.head_dim;
        let kv_dim = c.n_head_kv * hd;
        let beams = self.beams.borrow();
        let tables: Vec<&[hearth_model::kv::BlockId]> = (0..self.tables.shape().rows)
            .map(|r| self.tables.table(r).blocks())
            .collect();
        for (held, layer) in self.layers.iter().enumerate() {
            // `l` is the model's layer (its window, its RoPE); `held` the part's (its K/V).
            let l = self.part.layers.start + held;
            // Attention block: norm and QKV, RoPE and the K/V append, attention, the output
            // projection.
            let xn = ops::rmsnorm(&w.x, &layer.attn_norm, e, c.norm_eps);
            w.qkv.resize(n * c.qkv_dim(), 0.0);
            let mut input = Input::new(&xn, e, &mut w.act, w.mode);
            let out = Output {
                out: &mut w.qkv,
                stride: c.qkv_dim(),
                col0: 0,
            };
            project(k, &layer.wqkv, &mut input, out, &mut w.transposed);
            let table = match &self.local_rope_table {
                Some(local) if c.local_rope(l) => local,
                _ => &self.rope_table,
            };
            if let (Some(lt), Some(lw)) = (c.latent, &layer.latent) {
                let rope = c.rope_at(l).map(|_| &table[..]);
                let store = &mut self.k[held];
                latent::queries_and_rows(k, c, layer, tokens, rope, &self.tables, store, w);
                w.latents.resize(n * c.n_head * lt.kv_lora, 0.0);
                let cache = Cache {
                    tables: &tables,
                    k: &self.k[held],
                    v: &self.k[held],
                    beams: &beams,
                };
                attention::attend(
                    k,
                    c,
                    l,
                    tokens,
                    &w.q_abs,
                    &cache,
                    &mut w.latents,
                    &mut w.staged,
                    None,
                );
                let latents = std::mem::take(&mut w.latents);
                let mut att = std::mem::take(&mut w.att);
                att.resize(n * c.attn_dim(), 0.0);
                latent::values(k, c, &lw.wv_b, &latents, &mut att, w);
                (w.latents, w.att) = (latents, att);
            } else {
                let adjust = layer.qkv_adjust(c.norm_eps, c.qk_norm_whole);
                ops::qkv_adjust(&mut w.qkv, adjust, c.n_head, c.n_head_kv, hd);
                for (t, row) in w.qkv.chunks_mut(c.qkv_dim()).enumerate() {
                    let at = &tokens[t];
                    let (qk, v) = row.split_at_mut((c.n_head + c.n_head_kv) * hd);
                    if let Some(r) = c.rope_at(l) {
                        let pos = [at.pos as u32];
                        let heads = c.n_head + c.n_head_kv;
                        ops::rope(qk, &pos, heads, hd, r.dims, r.layout, table);
                    }
                    // Where the step writes: its own row, never through a beam table.
                    let Some((block, i)) = self.tables.table(at.row).locate(at.pos) else {
                        continue;
                    };
                    let slot = block as usize * hearth_model::kv::BLOCK_TOKENS + i;
                    // The store rounds K and V as the cache's type keeps them.
                    self.k[held].write(slot, &qk[c.attn_dim()..]);
                    self.v[held].write(slot, &v[..kv_dim]);
                }
                w.att.resize(n * c.attn_dim(), 0.0);
                let cache = Cache {
                    tables: &tables,
                    k: &self.k[held],
                    v: &self.v[held],
                    beams: &beams,
                };
                let sinks = layer.attn_sinks.as_deref();
                attention::attend(
                    k,
                    c,
                    l,
                    tokens,
                    &w.qkv,
                    &cache,
                    &mut w.att,
                    &mut w.staged,
                    sinks,
                );
            }
            w.out.resize(n * e, 0.0);
            let mut input = Input::new(&w.att, c.attn_dim(), &mut w.act, w.mode);
            let out = Output {
                out: &mut w.out,
                stride: e,
                col0: 0,
            };
            project(k, &layer.wo, &mut input, out, &mut w.transposed);
            if let Some(bias) = &layer.wo_bias {
                ops::add_bias(&mut w.out, bias);
            }
            add_block_output(&mut w.x, &w.out, &layer.attn_post_norm, e, c.norm_eps);

            // MLP block.
            let xn = ops::rmsnorm(&w.x, &layer.ffn_norm, e, c.norm_eps);
            mlp::forward(k, c, layer, &xn, w);
            add_block_output(&mut w.x, &w.out, &layer.ffn_post_norm, e, c.norm_eps);
        }
    }

    /// The logits each sequence asked for, from the residual stream in `work.x`.
    fn logits(&mut self, seqs: &[SeqStep]) -> Vec<Vec<f32>> {
        let c = &self.config;
        let e = c.n_embd;
        let w = &mut self.work;
        let mut t0 = 0;
        let mut picked: Vec<(usize, usize)> = Vec::with_capacity(seqs.len());
        let mut rows = Vec::new();
        for s in seqs {
            let n = s.tokens.len();
            let take = match s.logits {
                Some(Logits::All) => t0..t0 + n,
                Some(Logits::Last) => t0 + n - 1..t0 + n,
                None => t0..t0,
            };
            picked.push((rows.len() / e.max(1), take.len()));
            for t in take {
                rows.extend_from_slice(&w.x[t * e..][..e]);
            }
            t0 += n;
        }
        let count = rows.len() / e.max(1);
        let mut out = vec![0f32; count * c.n_vocab];
        let head = self.output.as_ref().or(self.token_embd.as_ref());
        if let (true, Some(gain), Some(head)) = (count > 0, &self.output_norm, head) {
            let xn = ops::rmsnorm(&rows, gain, e, c.norm_eps);
            let mut input = Input::new(&xn, e, &mut w.act, w.mode);
            let o = Output {
                out: &mut out,
                stride: c.n_vocab,
                col0: 0,
            };
            crate::product::product(
                &self.kernels,
                head,
                0..head.matrix.rows,
                &mut input,
                o,
                &mut w.transposed,
            );
            if let Some(cap) = c.logit_softcap {
                ops::softcap(&mut out, cap);
            }
        }
        picked
            .into_iter()
            .map(|(first, n)| out[first * c.n_vocab..(first + n) * c.n_vocab].to_vec())
            .collect()
    }
}

/// x += a block's output, normed first where the model norms it.
fn add_block_output(x: &mut [f32], out: &[f32], gain: &Option<Vec<f32>>, e: usize, eps: f32) {
    match gain {
        Some(g) => {
            let normed = ops::rmsnorm(out, g, e, eps);
            x.iter_mut().zip(&normed).for_each(|(a, b)| *a += b);
        }
        None => x.iter_mut().zip(out).for_each(|(a, b)| *a += b),
    }
}
