//! A weight matrix as the device stores it: packed blocks of one `hearth-quant` format.
//!
//! GGUF tensors already in a Hearth format (F32, F16, Q4_0, Q4_1 = Q4, Q5_0, Q5_1,
//! Q8_0 = Q8, and Hearth's private formats) are used byte for byte; other GGUF types are dequantized and requantized
//! once at load into the format that keeps them best (see [`import_format`]).

use hearth_quant::{BlockType, Format};

/// A row-major [rows, cols] matrix packed in `format`; each row is whole blocks.
#[derive(Clone, Debug)]
pub struct Matrix {
    pub format: Format,
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<u8>,
}

impl Matrix {
    /// Packs f32 values (whole rows of whole blocks) in `format`.
    pub fn quantize(
        format: Format,
        rows: usize,
        cols: usize,
        values: &[f32],
    ) -> hearth_quant::Result<Self> {
        let row_bytes = format
            .bytes_for(cols)
            .ok_or(hearth_quant::Error::FormatPartialBlock {
                format,
                values: cols,
                block_size: format.block_size(),
            })?;
        let mut data = vec![0u8; rows * row_bytes];
        for_rows_parallel(&mut data, row_bytes, values, cols, |bytes, vals| {
            format.quantize(vals, bytes)
        })?;
        Ok(Self {
            format,
            rows,
            cols,
            data,
        })
    }

    /// Adds this matrix's bytes to its format's total in `tally` (an executor's report of
    /// the weights it holds, formats in the order first seen).
    pub fn tally_into(&self, tally: &mut Vec<(Format, u64)>) {
        let bytes = self.data.len() as u64;
        match tally.iter_mut().find(|(f, _)| *f == self.format) {
            Some((_, total)) => *total += bytes,
            None => tally.push((self.format, bytes)),
        }
    }

    /// Rows `first..first + count`, in the same format.
    pub fn row_range(&self, first: usize, count: usize) -> Self {
        let row_bytes = self.data.len() / self.rows.max(1);
        Self {
            format: self.format,
            rows: count,
            cols: self.cols,
            data: self.data[first * row_bytes..(first + count) * row_bytes].to_vec(),
        }
    }

    /// Columns `cols` of every row: the packed bytes where the range falls on whole blocks
    /// (of at least 32 values), else the exact values re-encoded as F16, the nearest format
    /// that splits anywhere; `None` when the range is not a multiple of 32 values.
    pub fn columns(&self, cols: std::ops::Range<usize>) -> Option<Self> {
        let n = cols.len();
        let block = min_row_block(self.format) as usize;
        if cols.start % block == 0 && n % block == 0 {
            let row_bytes = self.data.len() / self.rows.max(1);
            let skip = self.format.bytes_for(cols.start)?;
            let take = self.format.bytes_for(n)?;
            let mut data = Vec::with_capacity(self.rows * take);
            for row in self.data.chunks_exact(row_bytes.max(1)) {
                data.extend_from_slice(&row[skip..skip + take]);
            }
            return Some(Self {
                format: self.format,
                rows: self.rows,
                cols: n,
                data,
            });
        }
        if n % 32 != 0 {
            return None;
        }
        let values = self.to_f32();
        let picked: Vec<f32> = values
            .chunks_exact(self.cols)
            .flat_map(|row| &row[cols.clone()])
            .copied()
            .collect();
        Self::quantize(Format::F16, self.rows, n, &picked).ok()
    }

    /// The values the device computes with: the exact dequantization of the packed blocks.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        let row_bytes = self.data.len() / self.rows.max(1);
        // Sizes were checked when the matrix was built, so dequantization cannot fail.
        let _ = for_rows_parallel(&mut out, self.cols, &self.data, row_bytes, |vals, bytes| {
            self.format.dequantize(bytes, vals)
        });
        out
    }
}

/// A layer's weight matrix, [rows, cols]: consecutive runs of rows, each a [`Matrix`] packed
/// in one format. A matrix read from one tensor is one run. A fused projection (q, k and v;
/// gate and up) keeps each part's format, parts of one format in a row sharing a run, so
/// nothing is converted, and a file with one format throughout has one run per projection
/// (one product, as for an unfused matrix).
#[derive(Clone, Debug)]
pub struct Projection {
    pub runs: Vec<Matrix>,
}

impl Projection {
    /// The rows of `parts` (all `cols` wide) one after another, each in its own format.
    pub fn fuse(parts: Vec<Matrix>) -> Self {
        let mut runs: Vec<Matrix> = Vec::with_capacity(parts.len());
        for part in parts {
            match runs.last_mut() {
                Some(run) if run.format == part.format => {
                    run.rows += part.rows;
                    run.data.extend_from_slice(&part.data);
                }
                _ => runs.push(part),
            }
        }
        Self { runs }
    }

    pub fn rows(&self) -> usize {
        self.runs.iter().map(|r| r.rows).sum()
    }

    /// Stacked experts' gate and up matrices ([experts * rows, cols] each) as one, each
    /// expert's gate rows followed by its up rows: one run when both share a format.
    pub fn interleave_experts(gate: &Matrix, up: &Matrix, experts: usize) -> Self {
        let rows = gate.rows / experts.max(1);
        let parts = (0..experts)
            .flat_map(|e| [gate.row_range(e * rows, rows), up.row_range(e * rows, rows)]);
        Self::fuse(parts.collect())
    }

    /// The rows in `ranges`, one range after another, each piece in its run's format (runs
    /// of one format in a row joined, as [`fuse`](Self::fuse) joins them).
    pub fn take_rows(&self, ranges: &[std::ops::Range<usize>]) -> Self {
        let mut pieces = Vec::new();
        for range in ranges {
            let mut first = 0;
            for run in &self.runs {
                let (start, end) = (range.start.max(first), range.end.min(first + run.rows));
                if start < end {
                    pieces.push(run.row_range(start - first, end - start));
                }
                first += run.rows;
            }
        }
        Self::fuse(pieces)
    }

    /// Columns `cols` of every run (see [`Matrix::columns`]).
    pub fn columns(&self, cols: std::ops::Range<usize>) -> Option<Self> {
        let runs: Option<Vec<Matrix>> = self.runs.iter().map(|r| r.columns(cols.clone())).collect();
        Some(Self { runs: runs? })
    }

    /// The values the device computes with, [rows, cols]: each run's exact dequantization.
    pub fn to_f32(&self) -> Vec<f32> {
        self.runs.iter().flat_map(Matrix::to_f32).collect()
    }
}

impl From<Matrix> for Projection {
    fn from(m: Matrix) -> Self {
        Self { runs: vec![m] }
    }
}

/// The Hearth format a GGUF type is loaded as. Types that are Hearth formats (F32, F16, the
/// legacy types, the k-quants, the i-quants, the ternary types and MXFP4) stay as they are;
/// BF16 goes to F16.
pub fn import_format(ty: BlockType) -> Format {
    match ty.format() {
        Some(native) => native,
        None => Format::F16,
    }
}

/// The format rows of `cols` values load as: `preferred`, or where its blocks do not fit the
/// rows, the format [`Format::fitting`] chooses (the quantizer's rule too); `None` when rows
/// are not a multiple of 32 values, which no kernel reads.
pub fn fitting_format(preferred: Format, cols: usize) -> Option<Format> {
    let format = preferred.fitting(cols);
    (cols as u64 % min_row_block(format) == 0).then_some(format)
}

/// Values per block as the kernels read them: the format's block, and at least 32 (plain
/// floats are read in blocks of 32, like the smallest quantized blocks). Rows of a weight
/// matrix are whole blocks of this.
pub fn min_row_block(format: Format) -> u64 {
    format.block_size().max(32) as u64
}

/// Runs `f` on matching row slices of `out` and `input` on every core. Rows are independent.
fn for_rows_parallel<A: Send, B: Sync, E: Send>(
    out: &mut [A],
    out_row: usize,
    input: &[B],
    in_row: usize,
    f: impl Fn(&mut [A], &[B]) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let rows = out.len() / out_row.max(1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if rows < 64 || threads == 1 {
        return f(out, input);
    }
    let per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let f = &f;
        let jobs: Vec<_> = out
            .chunks_mut(per * out_row)
            .zip(input.chunks(per * in_row))
            .map(|(o, i)| s.spawn(move || f(o, i)))
            .collect();
        jobs.into_iter()
            .try_for_each(|j| j.join().expect("weight conversion thread panicked"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_parts_keep_their_formats() {
        let values: Vec<f32> = (0..64 * 5).map(|i| (i as f32 * 0.37).sin()).collect();
        let part = |format, rows: usize, at: usize| {
            Matrix::quantize(format, rows, 64, &values[at * 64..(at + rows) * 64]).unwrap()
        };
        // q and k in Q5_0, v in Q8_0, then Q4_0: three runs, bytes as they were.
        let (q, k, v, o) = (
            part(Format::Q5_0, 2, 0),
            part(Format::Q5_0, 1, 2),
            part(Format::Q8, 1, 3),
            part(Format::Q4_0, 1, 4),
        );
        let fused = Projection::fuse(vec![q.clone(), k.clone(), v.clone(), o.clone()]);
        let formats: Vec<_> = fused.runs.iter().map(|r| (r.format, r.rows)).collect();
        assert_eq!(
            formats,
            [(Format::Q5_0, 3), (Format::Q8, 1), (Format::Q4_0, 1)]
        );
        assert_eq!(
            fused.runs[0].data,
            [q.data.clone(), k.data.clone()].concat()
        );
        assert_eq!(
            (fused.runs[1].data.clone(), fused.rows()),
            (v.data.clone(), 5)
        );
        let want = [q.to_f32(), k.to_f32(), v.to_f32(), o.to_f32()].concat();
        assert_eq!(fused.to_f32(), want);
        let same = Projection::fuse(vec![q.clone(), q.clone()]);
        assert_eq!(same.runs.len(), 1);
        assert_eq!(same.runs[0].data, [q.data.clone(), q.data].concat());
    }

    #[test]
    fn formats_fall_back_to_blocks_that_fit() {
        assert_eq!(fitting_format(Format::Q3H, 576), Some(Format::Q3H));
        assert_eq!(fitting_format(Format::Q3H, 96), Some(Format::Q3));
        assert_eq!(fitting_format(Format::Q6, 96), Some(Format::Q8));
        assert_eq!(fitting_format(Format::F16, 40), None);
        assert_eq!(fitting_format(Format::Q4, 40), None);
        assert_eq!(import_format(BlockType::Q4_1), Format::Q4);
        assert_eq!(fitting_format(Format::Q6_K, 576), Some(Format::Q8));
        for (ty, f) in [
            (BlockType::Q4_0, Format::Q4_0),
            (BlockType::Q5_0, Format::Q5_0),
            (BlockType::Q5_1, Format::Q5_1),
            (BlockType::Q6_K, Format::Q6_K),
            (BlockType::IQ4_NL, Format::IQ4_NL),
            (BlockType::IQ4_XS, Format::IQ4_XS),
            (BlockType::MXFP4, Format::MXFP4),
            (BlockType::IQ1_S, Format::IQ1_S),
            (BlockType::IQ1_M, Format::IQ1_M),
            (BlockType::IQ2_XXS, Format::IQ2_XXS),
            (BlockType::IQ2_XS, Format::IQ2_XS),
            (BlockType::IQ2_S, Format::IQ2_S),
            (BlockType::IQ3_XXS, Format::IQ3_XXS),
            (BlockType::IQ3_S, Format::IQ3_S),
        ] {
            assert_eq!(import_format(ty), f, "{ty} loads as it is");
        }
        assert_eq!(import_format(BlockType::TQ1_0), Format::TQ1_0);
        assert_eq!(import_format(BlockType::TQ2_0), Format::TQ2_0);
        assert_eq!(import_format(BlockType::BF16), Format::F16);
    }
}
