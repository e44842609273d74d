//! Matrix products of packed weights with a step's activations, split by weight rows over
//! the thread pool: each task unpacks its rows once and takes each row's dot product with
//! every token, so a row's bytes are read from memory once per product whatever the number
//! of tokens.

use std::cell::RefCell;
use std::ops::Range;

use rayon::prelude::*;

use crate::act::{ActQ8, Activations};
use crate::dot::{InterleavedDot, Kernels, LevelsRow, PackedDot, PanelDot, TOKENS};
use crate::interleave::{self, ROWS};
use crate::levels::{has_base, unpacker, RowLevels, Unpack};
use crate::panel::Panel;
use crate::weights::{CpuMatrix, CpuProjection};
use hearth_quant::Format;

/// A step's input to products: the f32 rows and, quantized from them when first needed,
/// their 8-bit blocks (one quantization serves every product that reads the same input).
pub struct Input<'a> {
    pub x: &'a [f32],
    pub cols: usize,
    act: &'a mut ActQ8,
    quantized: bool,
    mode: Activations,
}

impl<'a> Input<'a> {
    /// `x` ([tokens, cols]), taken as `mode` says, quantizing into `act` (its memory
    /// reused) when a product needs it.
    pub fn new(x: &'a [f32], cols: usize, act: &'a mut ActQ8, mode: Activations) -> Self {
        Self {
            x,
            cols,
            act,
            quantized: false,
            mode,
        }
    }

    pub fn tokens(&self) -> usize {
        self.x.len() / self.cols.max(1)
    }

    fn quantized(&mut self, k: &Kernels) -> &ActQ8 {
        if !self.quantized {
            k.quantize(self.x, self.cols, self.act);
            self.quantized = true;
        }
        self.act
    }
}

/// Where a product writes: token `t`'s value of weight row `r` goes to
/// `out[t * stride + col0 + r]`.
pub struct Output<'a> {
    pub out: &'a mut [f32],
    pub stride: usize,
    pub col0: usize,
}

/// What each worker thread keeps between products: the row it unpacks into, the float row it
/// widens into, and its panel.
#[derive(Default)]
struct Scratch {
    levels: RowLevels,
    floats: Vec<f32>,
    panel: Panel,
}

/// Tokens from which a product unpacks its rows into panels (`crate::panel`) rather than
/// reading them packed: below it, unpacking costs more than the panel's faster products save.
pub const PANEL_MIN_TOKENS: usize = 16;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Products of every run of `w` with `input`, written from column `out.col0`.
pub fn project(
    k: &Kernels,
    w: &CpuProjection,
    input: &mut Input,
    out: Output,
    transposed: &mut Vec<f32>,
) {
    let mut col0 = out.col0;
    for run in &w.runs {
        let o = Output {
            out: &mut *out.out,
            stride: out.stride,
            col0,
        };
        let rows = run.matrix.rows;
        product(k, run, 0..rows, input, o, transposed);
        col0 += rows;
    }
}

/// Products of rows `rows` of `w` with `input`: `out.out[t * stride + col0 + (r - rows.start)]`.
/// `transposed` is scratch, reused across products.
pub fn product(
    k: &Kernels,
    weights: &CpuMatrix,
    rows: Range<usize>,
    input: &mut Input,
    out: Output,
    transposed: &mut Vec<f32>,
) {
    let n = input.tokens();
    let m = rows.len();
    if n == 0 || m == 0 {
        return;
    }
    let w = &weights.matrix;
    let cols = w.cols;
    let unpack = unpacker(w.format);
    let interleaved = match weights.interleaved {
        true => k.interleaved_dot(w.format, cols),
        false => None,
    };
    if weights.interleaved {
        let whole = rows.start % ROWS == 0 && rows.end % ROWS == 0;
        let (Some(dot), Some(unpack), Activations::Q8, true) =
            (interleaved, unpack, input.mode, whole)
        else {
            // Rows or activations the interleaved kernels do not take: the rows put back.
            let plain = CpuMatrix::rows(weights.plain_rows(rows));
            return product(k, &plain, 0..m, input, out, transposed);
        };
        let group_bytes = dot.group_bytes();
        let data = &w.data[rows.start / ROWS * group_bytes..rows.end / ROWS * group_bytes];
        let act = input.quantized(k);
        if let Some(panels) = k.panel_dot(w.format).filter(|_| n >= PANEL_MIN_TOKENS) {
            let rows = Rows {
                format: w.format,
                data,
                row_bytes: w.format.bytes_for(cols).unwrap_or(0),
                cols,
                interleaved: true,
            };
            return by_panels(&panels, unpack, rows, act, out, transposed);
        }
        return by_groups(&dot, data, act, out, transposed);
    }
    let row_bytes = w.data.len() / w.rows.max(1);
    let data = &w.data[rows.start * row_bytes..rows.end * row_bytes];
    let x = input.x;
    let packed = k.packed_dot(w.format, cols);
    let act = match (unpack, input.mode) {
        (Some(_), Activations::Q8) => Some(input.quantized(k)),
        _ => None,
    };
    let has_base = has_base(w.format);
    let plain = Rows {
        format: w.format,
        data,
        row_bytes,
        cols,
        interleaved: false,
    };
    if let (Some(unpack), Some(act)) = (unpack, act) {
        if let Some(panels) = k.panel_dot(w.format).filter(|_| n >= PANEL_MIN_TOKENS) {
            return by_panels(&panels, unpack, plain, act, out, transposed);
        }
    }

    // Float rows (F32, F16, BF16, or any format with f32 activations) against many tokens:
    // one matrix product per block of rows widened to f32.
    if act.is_none() && n >= PANEL_MIN_TOKENS {
        return by_gemm(k, plain, x, out, transposed);
    }

    // One output slot per (row, token), row-major by weight row, so that each task owns a
    // contiguous part; a single token needs no reordering.
    let target: &mut [f32] = if n == 1 {
        &mut out.out[out.col0..out.col0 + m]
    } else {
        transposed.resize(m * n, 0.0);
        &mut transposed[..]
    };
    let per_task = rows_per_task(m, n, cols);
    target
        .par_chunks_mut(per_task * n)
        .enumerate()
        .for_each(|(task, part)| {
            let first = task * per_task;
            // A decode step's packed rows: one call for the task's rows, no scratch.
            if let (1, Some(dot), Some(act)) = (n, packed, act) {
                let rows = &data[first * row_bytes..(first + part.len()) * row_bytes];
                dot.rows(rows, act.row(0), part);
                return;
            }
            SCRATCH.with_borrow_mut(|s| {
                for (i, ys) in part.chunks_mut(n).enumerate() {
                    let row = &data[(first + i) * row_bytes..][..row_bytes];
                    if let (Some(dot), Some(act)) = (packed, act) {
                        packed_row(&dot, row, act, ys);
                    } else if let Some(unpack) = unpack {
                        s.levels.unpack(w.format, unpack, row, cols);
                        let levels = LevelsRow {
                            levels: &s.levels.levels,
                            d: &s.levels.d,
                            m: &s.levels.m,
                            has_base,
                        };
                        for (t, y) in ys.iter_mut().enumerate() {
                            *y = match act {
                                Some(act) => k.levels(levels, act.row(t)),
                                None => k.levels_f32(levels, &x[t * cols..][..cols]),
                            };
                        }
                    } else if w.format == Format::F16 && n < PANEL_MIN_TOKENS {
                        // Few tokens: read the halves in place rather than widen the row.
                        for (t, y) in ys.iter_mut().enumerate() {
                            *y = k.f16_dot(row, &x[t * cols..][..cols]);
                        }
                    } else {
                        s.floats.resize(cols, 0.0);
                        // Sizes come from the matrix, so this cannot fail.
                        let _ = w.format.dequantize(row, &mut s.floats);
                        for (t, y) in ys.iter_mut().enumerate() {
                            *y = k.floats(&s.floats, &x[t * cols..][..cols]);
                        }
                    }
                }
            })
        });
    if n > 1 {
        untranspose(&transposed[..m * n], n, out);
    }
}

/// Rows of one matrix, packed; `interleaved`: in groups (`crate::interleave`), and
/// `row_bytes` the size of a row in the file's packing.
struct Rows<'a> {
    format: Format,
    data: &'a [u8],
    row_bytes: usize,
    cols: usize,
    interleaved: bool,
}

impl Rows<'_> {
    fn count(&self) -> usize {
        match self.interleaved {
            true => self.data.len() / interleave::bytes(ROWS, self.cols) * ROWS,
            false => self.data.len() / self.row_bytes,
        }
    }
}

/// The products of `rows` with every token of `act`, a panel of rows per step: each task
/// unpacks its panels and writes `[panel][token][lane]` to its part of `transposed`; the
/// results then go to `out` token by token, also in parallel.
fn by_panels(
    dot: &PanelDot,
    unpack: Unpack,
    rows: Rows,
    act: &ActQ8,
    out: Output,
    transposed: &mut Vec<f32>,
) {
    let (n, lanes) = (act.rows, dot.lanes());
    let m = rows.count();
    let panels = m.div_ceil(lanes);
    transposed.resize(panels * lanes * n, 0.0);
    let per_task = rows_per_task(panels, n * lanes, rows.cols);
    transposed
        .par_chunks_mut(per_task * lanes * n)
        .enumerate()
        .for_each(|(task, part)| {
            SCRATCH.with_borrow_mut(|s| {
                for (i, ys) in part.chunks_mut(lanes * n).enumerate() {
                    let first = (task * per_task + i) * lanes;
                    let (format, cols) = (rows.format, rows.cols);
                    if rows.interleaved {
                        // Panels are whole groups: `lanes` is a multiple of the group's rows.
                        let group_bytes = interleave::bytes(ROWS, cols);
                        let at = first / ROWS * group_bytes;
                        let end = rows.data.len().min(at + lanes / ROWS * group_bytes);
                        let left = m - first;
                        s.panel
                            .fill_interleaved(lanes, &rows.data[at..end], left, cols);
                    } else {
                        let data = &rows.data[first * rows.row_bytes..]
                            [..lanes.min(m - first) * rows.row_bytes];
                        s.panel
                            .fill(lanes, format, unpack, data, cols, &mut s.levels);
                    }
                    dot.run(&s.panel, act, ys);
                }
            })
        });
    let transposed = &transposed[..];
    out.out
        .par_chunks_mut(out.stride)
        .take(n)
        .enumerate()
        .for_each(|(t, o)| {
            let o = &mut o[out.col0..out.col0 + m];
            for (p, o) in o.chunks_mut(lanes).enumerate() {
                o.copy_from_slice(&transposed[(p * n + t) * lanes..][..o.len()]);
            }
        });
}

/// The products of interleaved groups `data` with every token of `act`, split by groups over
/// the pool: each group's rows are read once for all the tokens.
fn by_groups(
    dot: &InterleavedDot,
    data: &[u8],
    act: &ActQ8,
    out: Output,
    transposed: &mut Vec<f32>,
) {
    let n = act.rows;
    let group_bytes = dot.group_bytes();
    let groups = data.len() / group_bytes;
    let m = groups * ROWS;
    // Row-major by weight row, as `product` orders its other paths.
    let target: &mut [f32] = if n == 1 {
        &mut out.out[out.col0..out.col0 + m]
    } else {
        transposed.resize(m * n, 0.0);
        &mut transposed[..]
    };
    let per_task = rows_per_task(groups, n * ROWS, act.cols);
    target
        .par_chunks_mut(per_task * ROWS * n)
        .enumerate()
        .for_each(|(task, part)| {
            for (i, ys) in part.chunks_mut(ROWS * n).enumerate() {
                let g = task * per_task + i;
                dot.run(&data[g * group_bytes..][..group_bytes], act, ys);
            }
        });
    if n > 1 {
        untranspose(&transposed[..m * n], n, out);
    }
}

/// Values of a block of rows widened to f32 for one matrix product: 2 MiB, so that the block
/// and the product's own packed copies stay in a core's cache.
const GEMM_BLOCK_VALUES: usize = 512 * 1024;

/// The products of float `rows` (widened to f32 a block at a time) with the f32 tokens `x`,
/// each block one matrix product ([`Kernels::gemm`]) written token by token, so that each
/// token's values of a block go to `out` in one copy. Split by rows over the pool.
fn by_gemm(k: &Kernels, rows: Rows, x: &[f32], out: Output, transposed: &mut Vec<f32>) {
    let cols = rows.cols;
    let n = x.len() / cols;
    let m = rows.count();
    transposed.resize(m * n, 0.0);
    let per_task = rows_per_task(m, n, cols);
    let block_rows = (GEMM_BLOCK_VALUES / cols).clamp(1, per_task);
    // Task blocks are [block][token][row], blocks `block_rows` rows from the task's first.
    transposed[..m * n]
        .par_chunks_mut(per_task * n)
        .enumerate()
        .for_each(|(task, part)| {
            SCRATCH.with_borrow_mut(|s| {
                for (b, ys) in part.chunks_mut(block_rows * n).enumerate() {
                    let first = task * per_task + b * block_rows;
                    let count = ys.len() / n;
                    s.floats.resize(count * cols, 0.0);
                    let packed = &rows.data[first * rows.row_bytes..][..count * rows.row_bytes];
                    for (row, f) in packed
                        .chunks_exact(rows.row_bytes)
                        .zip(s.floats.chunks_exact_mut(cols))
                    {
                        // Sizes come from the matrix, so this cannot fail.
                        let _ = rows.format.dequantize(row, f);
                    }
                    k.gemm(&s.floats, x, cols, ys);
                }
            })
        });
    for (task, part) in transposed[..m * n].chunks(per_task * n).enumerate() {
        for (b, block) in part.chunks(block_rows * n).enumerate() {
            let (first, count) = (task * per_task + b * block_rows, block.len() / n);
            for (t, ys) in block.chunks_exact(count).enumerate() {
                let at = t * out.stride + out.col0 + first;
                out.out[at..at + count].copy_from_slice(ys);
            }
        }
    }
}

/// `by_row` ([rows][n], row-major by weight row) into `out`, token by token.
fn untranspose(by_row: &[f32], n: usize, out: Output) {
    for (r, ys) in by_row.chunks(n).enumerate() {
        for (t, &y) in ys.iter().enumerate() {
            out.out[t * out.stride + out.col0 + r] = y;
        }
    }
}

/// One packed row's products with every row of `act`: [`TOKENS`] at a time, then four, two
/// and one, so that each pass unpacks the row's blocks once for as many tokens as it can.
fn packed_row(dot: &PackedDot, row: &[u8], act: &ActQ8, ys: &mut [f32]) {
    let mut t = 0;
    while t < ys.len() {
        let left = ys.len() - t;
        let x = |i: usize| act.row(t + i);
        let n = if left >= TOKENS {
            let xs: [_; TOKENS] = std::array::from_fn(x);
            ys[t..t + TOKENS].copy_from_slice(&dot.many(row, &xs));
            TOKENS
        } else if left >= 4 {
            ys[t..t + 4].copy_from_slice(&dot.four(row, &std::array::from_fn(x)));
            4
        } else if left >= 2 {
            ys[t..t + 2].copy_from_slice(&dot.two(row, &std::array::from_fn(x)));
            2
        } else {
            ys[t] = dot.one(row, x(0));
            1
        };
        t += n;
    }
}

/// Rows per task: enough work per task to outweigh handing it to a thread (about 16k
/// multiply-adds), and at least four tasks a thread where the matrix allows, so that threads
/// finishing early take more.
fn rows_per_task(rows: usize, tokens: usize, cols: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let by_balance = rows.div_ceil(4 * threads);
    let by_cost = (16 * 1024usize).div_ceil(tokens * cols).max(1);
    by_balance.max(by_cost).clamp(1, rows)
}

/// Products of rows `rows` of a projection (counted across its runs) with `input`, written
/// from column `out.col0`: a mixture's expert is a range of rows of the stacked matrices.
pub fn project_rows(
    k: &Kernels,
    w: &CpuProjection,
    rows: Range<usize>,
    input: &mut Input,
    out: Output,
    transposed: &mut Vec<f32>,
) {
    let mut first = 0;
    let mut col0 = out.col0;
    for run in &w.runs {
        let run_rows = first..first + run.matrix.rows;
        first += run.matrix.rows;
        let (lo, hi) = (rows.start.max(run_rows.start), rows.end.min(run_rows.end));
        if lo >= hi {
            continue;
        }
        let o = Output {
            out: &mut *out.out,
            stride: out.stride,
            col0,
        };
        let local = lo - run_rows.start..hi - run_rows.start;
        product(k, run, local, input, o, transposed);
        col0 += hi - lo;
    }
}
