//! Multi-head latent attention on the reference (DeepSeek-V2/V3), in the absorbed form
//! llama.cpp runs: the cache holds, per position, the normed latent and the rotated key part
//! every head shares (one row of `head_dim` = kv_lora + rope values, rounded as the cache's
//! type keeps it); each head's unrotated query is taken into the latent's space by its rows of
//! `wk_b`, so that a score is one dot product with a cached row, and each head's softmax-weighted
//! sum of cached latents (the row's first kv_lora values: the values are the latent) is taken
//! out of it by its rows of `wv_b`.

use super::matmul::{dot, matmul};
use super::ops;
use super::CpuLayer;
use hearth_model::kv::stored::round_row;
use hearth_model::kv::KvType;
use hearth_model::ModelConfig;

/// What one layer's latent attention reads and writes.
pub(super) struct LatentStep<'a> {
    pub config: &'a ModelConfig,
    pub weights: &'a CpuLayer,
    /// The layer's rotary table, where it rotates.
    pub rope_table: Option<&'a [[f32; 2]]>,
    pub kv_type: KvType,
    /// Position of the step's first token.
    pub pos0: usize,
}

impl LatentStep<'_> {
    /// The step's attention output [n, n_head * v_dim] from the projection of its normed input
    /// `qkv` ([n, qkv_dim]: the queries or their low-rank part, the latent, the rotated key),
    /// its rows appended to `k_cache` ([n_ctx, kv_lora + rope]) first.
    pub fn attend(&self, qkv: &[f32], k_cache: &mut [f32]) -> Vec<f32> {
        let c = self.config;
        let Some(lt) = c.latent else {
            return Vec::new();
        };
        let (hd, h) = (c.head_dim, c.n_head);
        let n = qkv.len() / c.qkv_dim();
        let q_rows = c.latent_q_rows();
        let w = self.weights;
        let Some(lw) = &w.latent else {
            return Vec::new();
        };
        // The queries, through their low rank where they have one: [n, n_head * qk_dim].
        let q_part: Vec<f32> = qkv
            .chunks(c.qkv_dim())
            .flat_map(|row| &row[..q_rows])
            .copied()
            .collect();
        let mut q = match (&lw.q_a_norm, &lw.wq_b) {
            (Some(norm), Some(wq_b)) => {
                let normed = ops::rmsnorm(&q_part, norm, q_rows, c.norm_eps);
                matmul(&normed, wq_b, h * lt.qk_dim(), q_rows)
            }
            _ => q_part,
        };
        // Each token's cache row: the normed latent, then the rotated key.
        let mut absorbed = vec![0f32; n * h * hd];
        for (t, row) in qkv.chunks(c.qkv_dim()).enumerate() {
            let pos = self.pos0 + t;
            let (latent, k_pe) = row[q_rows..].split_at(lt.kv_lora);
            let mut k = ops::rmsnorm(latent, &lw.kv_a_norm, lt.kv_lora, c.norm_eps);
            k.extend_from_slice(k_pe);
            let q_t = &mut q[t * h * lt.qk_dim()..][..h * lt.qk_dim()];
            if let (Some(table), Some(r)) = (self.rope_table, c.rope) {
                let pos = [pos as u32];
                ops::rope(
                    &mut k[lt.kv_lora..],
                    &pos,
                    1,
                    lt.rope,
                    r.dims,
                    r.layout,
                    table,
                );
                for head in q_t.chunks_mut(lt.qk_dim()) {
                    let pe = &mut head[lt.nope..];
                    ops::rope(pe, &pos, 1, lt.rope, r.dims, r.layout, table);
                }
            }
            round_row(self.kv_type, &mut k);
            k_cache[pos * hd..][..hd].copy_from_slice(&k);
            // Each head's query: its unrotated part taken into the latent's space (head h's
            // [kv_lora, nope] rows of wk_b), then its rotated part.
            for (head, q_h) in q_t.chunks(lt.qk_dim()).enumerate() {
                let out = &mut absorbed[(t * h + head) * hd..][..hd];
                let wk_b = &lw.wk_b[head * lt.kv_lora * lt.nope..][..lt.kv_lora * lt.nope];
                for (o, w_row) in out[..lt.kv_lora].iter_mut().zip(wk_b.chunks(lt.nope)) {
                    *o = dot(w_row, &q_h[..lt.nope]);
                }
                out[lt.kv_lora..].copy_from_slice(&q_h[lt.nope..]);
            }
        }
        // Multi-query attention over the cached rows, then each head's value out of its
        // latent (head h's [v_dim, kv_lora] rows of wv_b).
        let mut att = vec![0f32; n * c.attn_dim()];
        let mut latent = vec![0f32; lt.kv_lora];
        for t in 0..n {
            let positions = 0..=self.pos0 + t;
            for head in 0..h {
                let q_h = &absorbed[(t * h + head) * hd..][..hd];
                let mut scores: Vec<f32> = positions
                    .clone()
                    .map(|p| dot(q_h, &k_cache[p * hd..][..hd]) * c.attn_scale)
                    .collect();
                ops::softmax_with_sink(&mut scores, None);
                latent.fill(0.0);
                for (p, &s) in positions.clone().zip(&scores) {
                    let v = &k_cache[p * hd..][..lt.kv_lora];
                    latent.iter_mut().zip(v).for_each(|(o, &v)| *o += s * v);
                }
                let wv_b = &lw.wv_b[head * lt.v_dim * lt.kv_lora..][..lt.v_dim * lt.kv_lora];
                let out = &mut att[t * c.attn_dim() + head * lt.v_dim..][..lt.v_dim];
                for (o, w_row) in out.iter_mut().zip(wv_b.chunks(lt.kv_lora)) {
                    *o = dot(w_row, &latent);
                }
            }
        }
        att
    }
}
