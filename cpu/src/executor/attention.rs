//! Attention over the paged cache: each step token's query heads over its sequence's cached
//! positions (its own and the step's earlier ones included), one task per token and KV head,
//! so the query heads of a group read each K and V row once.

use std::cell::RefCell;

use rayon::prelude::*;

use super::kv_store::KvStore;
use crate::dot::Kernels;
use hearth_model::kv::{BlockId, BLOCK_TOKENS};
use hearth_model::{ops, ModelConfig};

/// Where one step token reads its history.
#[derive(Clone, Copy, Debug)]
pub(super) struct TokenAt {
    /// Its cache row.
    pub row: usize,
    /// Its position in the row: it attends to positions `0..=pos`.
    pub pos: usize,
    /// The row holding each earlier position, where the sequence reads through a beam table
    /// (positions past the table's end are in `row`).
    pub beam: Option<usize>,
}

/// What attention of one layer reads.
pub(super) struct Cache<'a> {
    /// Each row's blocks.
    pub tables: &'a [&'a [BlockId]],
    pub k: &'a KvStore,
    pub v: &'a KvStore,
    /// Beam tables, by the row that set them.
    pub beams: &'a [Vec<u32>],
}

impl Cache<'_> {
    /// The pool slot holding position `p` for `at`.
    fn slot(&self, at: &TokenAt, p: usize) -> usize {
        let row = match at.beam {
            Some(b) => self.beams[b].get(p).map_or(at.row, |&r| r as usize),
            None => at.row,
        };
        // The step checked the rows and appended every position it reads.
        let block = self.tables[row].get(p / BLOCK_TOKENS).copied().unwrap_or(0);
        block as usize * BLOCK_TOKENS + p % BLOCK_TOKENS
    }
}

#[derive(Default)]
struct Scratch {
    /// [group, positions] scores, then probabilities.
    scores: Vec<f32>,
    row: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Layer `l`'s attention of the step's tokens `at` ([n]) with queries in `qkv`
/// ([n, qkv_dim], after RoPE) into `att` ([n, n_head * head_dim]).
pub(super) fn attend(
    k: &Kernels,
    c: &ModelConfig,
    l: usize,
    tokens: &[TokenAt],
    qkv: &[f32],
    cache: &Cache,
    att: &mut [f32],
) {
    let hd = c.head_dim;
    let group = c.n_head / c.n_head_kv;
    let kv_dim = c.n_head_kv * hd;
    let window = c.window(l);
    att.par_chunks_mut(group * hd)
        .enumerate()
        .for_each(|(task, out)| {
            let (t, kvh) = (task / c.n_head_kv, task % c.n_head_kv);
            let at = &tokens[t];
            let n_kv = at.pos + 1;
            // A local layer sees the window's most recent positions only.
            let first = window.map_or(0, |w| n_kv.saturating_sub(w));
            let positions = n_kv - first;
            let q = &qkv[t * c.qkv_dim() + kvh * group * hd..][..group * hd];
            SCRATCH.with_borrow_mut(|s| {
                s.scores.resize(group * positions, 0.0);
                s.row.resize(hd, 0.0);
                for (i, p) in (first..n_kv).enumerate() {
                    cache
                        .k
                        .read(cache.slot(at, p), kv_dim, kvh * hd, &mut s.row);
                    for g in 0..group {
                        let score = k.floats(&q[g * hd..][..hd], &s.row) * c.attn_scale;
                        s.scores[g * positions + i] = score;
                    }
                }
                for scores in s.scores.chunks_mut(positions) {
                    if let Some(cap) = c.attn_softcap {
                        ops::softcap(scores, cap);
                    }
                    softmax(scores);
                }
                out.fill(0.0);
                for (i, p) in (first..n_kv).enumerate() {
                    cache
                        .v
                        .read(cache.slot(at, p), kv_dim, kvh * hd, &mut s.row);
                    for (g, out) in out.chunks_mut(hd).enumerate() {
                        let w = s.scores[g * positions + i];
                        for (o, &v) in out.iter_mut().zip(&s.row) {
                            *o += w * v;
                        }
                    }
                }
            });
        });
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}
