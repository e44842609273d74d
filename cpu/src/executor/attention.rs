//! Attention over the paged cache: each step token's query heads over its sequence's cached
//! positions (its own and the step's earlier ones included). One task per tile of a
//! sequence's tokens, KV head and part of the positions, so a prompt's tokens and the query
//! heads of a group read each K and V row once. A decode step has too few tiles and heads to
//! keep every thread busy over a long context, so its positions are split into parts, each
//! with its own softmax, merged after (the online softmax's rescaling: each part's sums
//! scaled by `exp(its max - the max)`).

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

/// The widths attention reads and writes: each query head's and key's (`k`) and value's
/// (`v`), and the strides of the step's queries (per token), of the V store's rows and of
/// the output (per token).
#[derive(Clone, Copy, Debug)]
pub(super) struct Widths {
    pub k: usize,
    pub v: usize,
    pub q_stride: usize,
    pub v_stride: usize,
    pub out_stride: usize,
}

impl Widths {
    /// Queries in the q/k/v projection's rows and values as wide as keys, or, with latent
    /// attention, the absorbed queries ([n, n_head * head_dim]) and the latents, the keys'
    /// first `kv_lora` values, read from the keys' store.
    pub fn of(c: &ModelConfig) -> Self {
        match c.latent {
            Some(l) => Widths {
                k: c.head_dim,
                v: l.kv_lora,
                q_stride: c.n_head * c.head_dim,
                v_stride: c.head_dim,
                out_stride: c.n_head * l.kv_lora,
            },
            None => Widths {
                k: c.head_dim,
                v: c.head_dim,
                q_stride: c.qkv_dim(),
                v_stride: c.n_head_kv * c.head_dim,
                out_stride: c.attn_dim(),
            },
        }
    }
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
    /// [CHUNK, head_dim] K or V rows widened to f32 (V rows their own width).
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

/// Fewest positions a part of a split task reads: below it, merging costs more than the
/// spread work saves.
const MIN_PART: usize = 256;

/// One part's softmax statistics per token and query head: the largest score and the sum of
/// `exp(score - largest)`, by which its weighted sum of V rows is still to be divided.
#[derive(Clone, Copy, Debug)]
struct Stats {
    max: f32,
    sum: f32,
}

/// Layer `l`'s attention of the step's tokens `at` ([n]) with queries in `qkv`
/// ([n, q_stride], after RoPE) into `att` ([n, out_stride]: each query head's `dims.v`
/// values), each query head's softmax with its sink logit in the denominator where the layer
/// has `sinks` ([n_head]). `staged` is scratch, reused across steps: each task (a tile of
/// tokens, one KV head, a part of the positions) writes its own part.
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
    sinks: Option<&[f32]>,
) {
    let dims = Widths::of(c);
    let group = c.n_head / c.n_head_kv;
    let width = group * dims.v;
    let tiles = tiles(tokens);
    let ranges: Vec<Range<usize>> = tiles
        .iter()
        .map(|tile| {
            let spans = tokens[tile.clone()].iter().map(|at| span(c, l, at));
            let lo = spans.clone().map(|r| r.start).min().unwrap_or(0);
            lo..spans.map(|r| r.end).max().unwrap_or(0)
        })
        .collect();
    // Parts per task: enough tasks for two a thread, each of at least MIN_PART positions.
    let tasks = tiles.len() * c.n_head_kv;
    let longest = ranges.iter().map(|r| r.len()).max().unwrap_or(0);
    let wanted = (2 * rayon::current_num_threads()).div_ceil(tasks.max(1));
    let parts = wanted.min(longest / MIN_PART).max(1);
    let values = tokens.len() * c.n_head_kv * parts;
    staged.resize(values * width, 0.0);
    let mut stats = vec![Stats { max: 0.0, sum: 0.0 }; values * group];
    // Staged as [tile][kv head][part][token][width], statistics as [..][token][group].
    let mut work = Vec::with_capacity(tasks * parts);
    let (mut rest, mut rest_stats) = (&mut staged[..], &mut stats[..]);
    for (tile, range) in tiles.iter().zip(&ranges) {
        for kvh in 0..c.n_head_kv {
            for p in 0..parts {
                let (out, tail) = rest.split_at_mut(tile.len() * width);
                let (st, tail_stats) = rest_stats.split_at_mut(tile.len() * group);
                let (lo, len) = (range.start, range.len());
                let part = lo + p * len / parts..lo + (p + 1) * len / parts;
                work.push((tile.clone(), kvh, part, out, st));
                (rest, rest_stats) = (tail, tail_stats);
            }
        }
    }
    work.into_par_iter().for_each(|(tile, kvh, part, out, st)| {
        let task = Task {
            tokens: &tokens[tile.clone()],
            first: tile.start,
            kvh,
            part,
        };
        SCRATCH.with_borrow_mut(|s| attend_tile(k, c, l, &task, qkv, cache, out, st, s));
    });
    // Each token's query heads: the parts' sums, rescaled to the largest max, divided by the
    // total, to which a sink adds its own exp and nothing to the sum of values.
    let hd = dims.v;
    let mut at = 0;
    for tile in &tiles {
        for kvh in 0..c.n_head_kv {
            for (i, t) in tile.clone().enumerate() {
                for g in 0..group {
                    let stat = |p: usize| stats[(at + p * tile.len() + i) * group + g];
                    let sink = sinks.map(|s| s[kvh * group + g]);
                    let max = (0..parts)
                        .map(|p| stat(p).max)
                        .fold(sink.unwrap_or(f32::NEG_INFINITY), f32::max);
                    let scale = |p: usize| (stat(p).max - max).exp();
                    let total: f32 = (0..parts).map(|p| stat(p).sum * scale(p)).sum::<f32>()
                        + sink.map_or(0.0, |s| (s - max).exp());
                    let out = &mut att[t * dims.out_stride + kvh * width + g * hd..][..hd];
                    out.fill(0.0);
                    for p in 0..parts {
                        let w = scale(p) / total;
                        let from = &staged[((at + p * tile.len() + i) * group + g) * hd..][..hd];
                        out.iter_mut().zip(from).for_each(|(o, v)| *o += w * v);
                    }
                }
            }
            at += parts * tile.len();
        }
    }
}

/// The positions `at` reads at layer `l`: up to its own, a local layer's window only.
fn span(c: &ModelConfig, l: usize, at: &TokenAt) -> Range<usize> {
    let n_kv = at.pos + 1;
    c.window(l).map_or(0, |w| n_kv.saturating_sub(w))..n_kv
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

/// One task: a tile's tokens (step tokens `first..`), the KV head they read, and the part of
/// their positions.
struct Task<'a> {
    tokens: &'a [TokenAt],
    first: usize,
    kvh: usize,
    part: Range<usize>,
}

/// A tile's attention for one KV head over its part of the positions into `out`
/// ([token][group * head_dim]) and `stats` ([token][group]): every query head of the group,
/// each token over its own positions within the part, its weighted sum of V rows not yet
/// divided by its softmax's sum.
#[allow(clippy::too_many_arguments)]
fn attend_tile(
    k: &Kernels,
    c: &ModelConfig,
    l: usize,
    task: &Task,
    qkv: &[f32],
    cache: &Cache,
    out: &mut [f32],
    stats: &mut [Stats],
    s: &mut Scratch,
) {
    let dims = Widths::of(c);
    let (hd, vd) = (dims.k, dims.v);
    let group = c.n_head / c.n_head_kv;
    let kv_dim = c.n_head_kv * hd;
    // Token i reads positions `spans[i]` (possibly none) of the part.
    let mut spans = std::mem::take(&mut s.spans);
    spans.clear();
    spans.extend(task.tokens.iter().map(|at| {
        let all = span(c, l, at);
        let (lo, hi) = (all.start.max(task.part.start), all.end.min(task.part.end));
        lo..hi.max(lo)
    }));
    let base = spans.iter().map(|r| r.start).min().unwrap_or(0);
    let end = spans.iter().map(|r| r.end).max().unwrap_or(0);
    let positions = end - base;
    let query = |i: usize, g: usize| {
        let t = task.first + i;
        &qkv[t * dims.q_stride + (task.kvh * group + g) * hd..][..hd]
    };
    let at = &task.tokens[0];
    s.scores.resize(task.tokens.len() * group * positions, 0.0);
    s.rows.resize(CHUNK * hd.max(vd), 0.0);
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
            let (max, sum) = k.exp_shifted(scores);
            stats[i * group + g] = Stats { max, sum };
        }
    }
    // The probabilities' weighted sums of V rows, a chunk at a time.
    out.fill(0.0);
    for c0 in (base..end).step_by(CHUNK) {
        let c1 = (c0 + CHUNK).min(end);
        for (p, row) in (c0..c1).zip(s.rows.chunks_exact_mut(vd)) {
            cache
                .v
                .read(cache.slot(at, p), dims.v_stride, task.kvh * vd, row);
        }
        for (i, span) in spans.iter().enumerate() {
            let (lo, hi) = (span.start.max(c0), span.end.min(c1));
            if lo >= hi {
                continue;
            }
            let values = &s.rows[(lo - c0) * vd..(hi - c0) * vd];
            for g in 0..group {
                let at = (i * group + g) * positions;
                let w = &s.scores[at + lo - base..at + hi - base];
                k.weighted_sum(w, values, &mut out[(i * group + g) * vd..][..vd]);
            }
        }
    }
    s.spans = spans;
}
