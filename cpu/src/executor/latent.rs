//! Multi-head latent attention on the native executor (DeepSeek-V2/V3), in the absorbed form
//! llama.cpp runs: the cache holds, per position, the normed latent and the rotated key part
//! (one "KV head" of kv_lora + rope values, rounded as the store's type keeps it); each head's
//! unrotated query is taken into the latent's space by its rows of `wk_b`, so that attention is
//! multi-query attention over the cached rows, with the rows' first kv_lora values as the
//! values; each head's output latent is taken out of it by its rows of `wv_b`.

use super::kv_store::KvStore;
use super::work::Work;
use super::CpuLayer;
use crate::dot::Kernels;
use crate::product::{project_rows, Input, Output};
use crate::weights::CpuProjection;
use hearth_model::kv::{KvTables, BLOCK_TOKENS};
use hearth_model::{ops, ModelConfig};

use super::attention::TokenAt;

/// From the step's projection of its normed input (`w.qkv`, [n, qkv_dim]: the queries or
/// their low-rank part, the latent, the rotated key): the queries through their low rank
/// where they have one, RoPE on the rotated parts, each token's cache row written to `store`
/// (at the slot of its row's table), and the absorbed queries in `w.q_abs`
/// ([n, n_head * head_dim]: each head's latent-space query, then its rotated part).
#[allow(clippy::too_many_arguments)]
pub(super) fn queries_and_rows(
    k: &Kernels,
    c: &ModelConfig,
    layer: &CpuLayer,
    tokens: &[TokenAt],
    rope: Option<&[[f32; 2]]>,
    tables: &KvTables,
    store: &mut KvStore,
    w: &mut Work,
) {
    let (Some(lt), Some(lw)) = (c.latent, &layer.latent) else {
        return;
    };
    let n = tokens.len();
    let (h, hd, qk) = (c.n_head, c.head_dim, lt.qk_dim());
    let q_rows = c.latent_q_rows();
    // The queries: [n, n_head * qk].
    let part: Vec<f32> = w
        .qkv
        .chunks(c.qkv_dim())
        .flat_map(|row| &row[..q_rows])
        .copied()
        .collect();
    match (&lw.q_a_norm, &lw.wq_b) {
        (Some(norm), Some(wq_b)) => {
            let normed = ops::rmsnorm(&part, norm, q_rows, c.norm_eps);
            w.q.clear();
            w.q.resize(n * h * qk, 0.0);
            let mut input = Input::new(&normed, q_rows, &mut w.act, w.mode);
            let o = Output {
                out: &mut w.q,
                stride: h * qk,
                col0: 0,
            };
            project_rows(k, wq_b, 0..h * qk, &mut input, o, &mut w.transposed);
        }
        _ => w.q = part,
    }
    // RoPE, and each token's cache row.
    let mut row = vec![0f32; hd];
    for (t, at) in tokens.iter().enumerate() {
        let proj = &w.qkv[t * c.qkv_dim() + q_rows..][..lt.kv_lora + lt.rope];
        let (latent, k_pe) = proj.split_at(lt.kv_lora);
        row[..lt.kv_lora].copy_from_slice(&ops::rmsnorm(
            latent,
            &lw.kv_a_norm,
            lt.kv_lora,
            c.norm_eps,
        ));
        row[lt.kv_lora..].copy_from_slice(k_pe);
        let q_t = &mut w.q[t * h * qk..][..h * qk];
        if let (Some(table), Some(r)) = (rope, c.rope) {
            let pos = [at.pos as u32];
            ops::rope(
                &mut row[lt.kv_lora..],
                &pos,
                1,
                lt.rope,
                r.dims,
                r.layout,
                table,
            );
            for head in q_t.chunks_mut(qk) {
                ops::rope(
                    &mut head[lt.nope..],
                    &pos,
                    1,
                    lt.rope,
                    r.dims,
                    r.layout,
                    table,
                );
            }
        }
        // Where the step writes: its own row, never through a beam table. The store rounds
        // the row as the cache's type keeps it.
        if let Some((block, i)) = tables.table(at.row).locate(at.pos) {
            store.write(block as usize * BLOCK_TOKENS + i, &row);
        }
    }
    // The absorbed queries: each head's unrotated part through its rows of wk_b, then its
    // rotated part.
    w.q_abs.clear();
    w.q_abs.resize(n * h * hd, 0.0);
    for head in 0..h {
        gather(&w.q, h * qk, head * qk, lt.nope, &mut w.head_in);
        let mut input = Input::new(&w.head_in, lt.nope, &mut w.act, w.mode);
        let o = Output {
            out: &mut w.q_abs,
            stride: h * hd,
            col0: head * hd,
        };
        let rows = head * lt.kv_lora..(head + 1) * lt.kv_lora;
        project_rows(k, &lw.wk_b, rows, &mut input, o, &mut w.transposed);
        for t in 0..n {
            let from = &w.q[t * h * qk + head * qk + lt.nope..][..lt.rope];
            w.q_abs[t * h * hd + head * hd + lt.kv_lora..][..lt.rope].copy_from_slice(from);
        }
    }
}

/// Each head's value from its output latent (`latents`, [n, n_head * kv_lora]) through its
/// rows of `wv_b`, into `att` ([n, n_head * v_dim]).
pub(super) fn values(
    k: &Kernels,
    c: &ModelConfig,
    wv_b: &CpuProjection,
    latents: &[f32],
    att: &mut [f32],
    w: &mut Work,
) {
    let Some(lt) = c.latent else {
        return;
    };
    let h = c.n_head;
    for head in 0..h {
        gather(
            latents,
            h * lt.kv_lora,
            head * lt.kv_lora,
            lt.kv_lora,
            &mut w.head_in,
        );
        let mut input = Input::new(&w.head_in, lt.kv_lora, &mut w.act, w.mode);
        let o = Output {
            out: att,
            stride: h * lt.v_dim,
            col0: head * lt.v_dim,
        };
        let rows = head * lt.v_dim..(head + 1) * lt.v_dim;
        project_rows(k, wv_b, rows, &mut input, o, &mut w.transposed);
    }
}

/// Values `first..first + width` of every row of `x` (rows of `stride`) into `out`.
fn gather(x: &[f32], stride: usize, first: usize, width: usize, out: &mut Vec<f32>) {
    out.clear();
    for row in x.chunks(stride) {
        out.extend_from_slice(&row[first..first + width]);
    }
}
