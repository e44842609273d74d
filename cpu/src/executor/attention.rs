//! Attention over the paged cache: each step token's query heads over its sequence's cached
//! positions (its own and the step's earlier ones included). One task per tile of a
//! sequence's tokens and KV head, so a prompt's tokens and the query heads of a group read
//! each K and V row once.

use std::cell::RefCell;
use std::ops::Range;

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
    /// [CHUNK, head_dim] K or V rows widened to f32.
    rows: Vec<f32>,
    /// Each tile token's positions.
    spans: Vec<Range<usize>>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Step tokens that attend together: consecutive tokens of one sequence read the same slots,
/// so each K and V row is read and widened once for all of them.
const TILE: usize = 16;

/// Positions whose K (or V) rows a task widens at a time.
const CHUNK: usize = 64;

/// Layer `l`'s attention of the step's tokens `at` ([n]) with queries in `qkv`
/// ([n, qkv_dim], after RoPE) into `att` ([n, n_head * head_dim]). `staged` is scratch,
/// reused across steps: each task (a tile of tokens and one KV head) writes its own part.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    k: &Kernels,
    c: &ModelConfig,
    l: usize,
    tokens: &[TokenAt],
    qkv: &[f32],
    cache: &Cache,
    att: &mut [f32],
    staged: &mut Vec<f32>,
) {
    let width = c.n_head / c.n_head_kv * c.head_dim;
    let tiles = tiles(tokens);
    staged.resize(tokens.len() * c.attn_dim(), 0.0);
    let mut tasks = Vec::with_capacity(tiles.len() * c.n_head_kv);
    let mut rest = &mut staged[..];
    for tile in &tiles {
        for kvh in 0..c.n_head_kv {
            let (part, tail) = rest.split_at_mut(tile.len() * width);
            tasks.push((tile.clone(), kvh, part));
            rest = tail;
        }
    }
    tasks.into_par_iter().for_each(|(tile, kvh, out)| {
        let task = Task {
            tokens: &tokens[tile.clone()],
            first: tile.start,
            kvh,
        };
        SCRATCH.with_borrow_mut(|s| attend_tile(k, c, l, &task, qkv, cache, out, s));
    });
    // `staged` holds each tile's [kv head][token][width]; `att` is [token][kv head][width].
    let mut from = staged.chunks_exact(width);
    for tile in &tiles {
        for kvh in 0..c.n_head_kv {
            for t in tile.clone() {
                if let Some(part) = from.next() {
                    att[t * c.attn_dim() + kvh * width..][..width].copy_from_slice(part);
                }
            }
        }
    }
}

/// The step's tokens in runs of at most [`TILE`] that share a row and a beam table.
fn tiles(tokens: &[TokenAt]) -> Vec<Range<usize>> {
    let mut tiles: Vec<Range<usize>> = Vec::new();
    for (t, at) in tokens.iter().enumerate() {
        match tiles.last_mut() {
            Some(tile)
                if tile.len() < TILE
                    && tokens[tile.start].row == at.row
                    && tokens[tile.start].beam == at.beam =>
            {
                tile.end = t + 1
            }
            _ => tiles.push(t..t + 1),
        }
    }
    tiles
}

/// One task: a tile's tokens (step tokens `first..`) and the KV head they read.
struct Task<'a> {
    tokens: &'a [TokenAt],
    first: usize,
    kvh: usize,
}

/// A tile's attention for one KV head into `out` ([token][group * head_dim]): every query
/// head of the group, each token over its own positions.
#[allow(clippy::too_many_arguments)]
fn attend_tile(
    k: &Kernels,
    c: &ModelConfig,
    l: usize,
    task: &Task,
    qkv: &[f32],
    cache: &Cache,
    out: &mut [f32],
    s: &mut Scratch,
) {
    let hd = c.head_dim;
    let group = c.n_head / c.n_head_kv;
    let kv_dim = c.n_head_kv * hd;
    let window = c.window(l);
    // Token i reads positions `spans[i]`: up to its own, a local layer's window only.
    let mut spans = std::mem::take(&mut s.spans);
    spans.clear();
    spans.extend(task.tokens.iter().map(|at| {
        let n_kv = at.pos + 1;
        window.map_or(0, |w| n_kv.saturating_sub(w))..n_kv
    }));
    let base = spans.iter().map(|r| r.start).min().unwrap_or(0);
    let end = spans.iter().map(|r| r.end).max().unwrap_or(0);
    let positions = end - base;
    let query = |i: usize, g: usize| {
        let t = task.first + i;
        &qkv[t * c.qkv_dim() + (task.kvh * group + g) * hd..][..hd]
    };
    let at = &task.tokens[0];
    s.scores.resize(task.tokens.len() * group * positions, 0.0);
    s.rows.resize(CHUNK * hd, 0.0);
    // Scores, a chunk of K rows at a time.
    for c0 in (base..end).step_by(CHUNK) {
        let c1 = (c0 + CHUNK).min(end);
        for (p, row) in (c0..c1).zip(s.rows.chunks_exact_mut(hd)) {
            cache.k.read(cache.slot(at, p), kv_dim, task.kvh * hd, row);
        }
        for (i, span) in spans.iter().enumerate() {
            for g in 0..group {
                let (lo, hi) = (span.start.max(c0), span.end.min(c1));
                if lo >= hi {
                    continue;
                }
                let at = (i * group + g) * positions;
                let scores = &mut s.scores[at + lo - base..at + hi - base];
                k.dots(query(i, g), &s.rows[(lo - c0) * hd..(hi - c0) * hd], scores);
                scores.iter_mut().for_each(|v| *v *= c.attn_scale);
            }
        }
    }
    for (i, span) in spans.iter().enumerate() {
        for g in 0..group {
            let row = &mut s.scores[(i * group + g) * positions..][..positions];
            let scores = &mut row[span.start - base..span.end - base];
            if let Some(cap) = c.attn_softcap {
                ops::softcap(scores, cap);
            }
            softmax(scores);
        }
    }
    // The probabilities' weighted sums of V rows, a chunk at a time.
    out.fill(0.0);
    for c0 in (base..end).step_by(CHUNK) {
        let c1 = (c0 + CHUNK).min(end);
        for (p, row) in (c0..c1).zip(s.rows.chunks_exact_mut(hd)) {
            cache.v.read(cache.slot(at, p), kv_dim, task.kvh * hd, row);
        }
        for (i, span) in spans.iter().enumerate() {
            let (lo, hi) = (span.start.max(c0), span.end.min(c1));
            if lo >= hi {
                continue;
            }
            let values = &s.rows[(lo - c0) * hd..(hi - c0) * hd];
            for g in 0..group {
                let at = (i * group + g) * positions;
                let w = &s.scores[at + lo - base..at + hi - base];
                k.weighted_sum(w, values, &mut out[(i * group + g) * hd..][..hd]);
            }
        }
    }
    s.spans = spans;
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
