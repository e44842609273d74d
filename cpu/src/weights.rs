//! Weight matrices as the CPU executor holds them: rows packed as the file holds them, or,
//! where this instruction set's kernels read them faster so, interleaved (`crate::interleave`).

use std::ops::Range;

use crate::act::Activations;
use crate::dot::Kernels;
use crate::interleave::{self, ROWS};
use hearth_model::{Matrix, Projection};

/// One matrix, in the layout its products read.
#[derive(Clone, Debug)]
pub struct CpuMatrix {
    /// The format, shape and bytes; the bytes interleaved where `interleaved`.
    pub matrix: Matrix,
    pub interleaved: bool,
}

impl CpuMatrix {
    /// `matrix` as the file packs it.
    pub fn rows(matrix: Matrix) -> Self {
        Self {
            matrix,
            interleaved: false,
        }
    }

    /// `matrix`, interleaved where `k` has interleaved kernels for its format and shape and
    /// products take quantized activations; `unit` rows (a mixture's expert) must stay whole
    /// groups, so that a product of any unit's rows reads whole groups.
    pub fn for_kernels(k: &Kernels, mode: Activations, matrix: Matrix, unit: usize) -> Self {
        let Matrix { format, rows, .. } = matrix;
        let cols = matrix.cols;
        let interleave = mode == Activations::Q8
            && unit % ROWS == 0
            && interleave::fits(format, rows, cols)
            && k.interleaved_dot(format, cols).is_some();
        if !interleave {
            return Self::rows(matrix);
        }
        let data = interleave::q4_k(&matrix.data, cols);
        Self {
            matrix: Matrix { data, ..matrix },
            interleaved: true,
        }
    }

    /// Rows `rows` in the file's packing (a copy where interleaved): for products that take
    /// rows the interleaved kernels do not.
    pub fn plain_rows(&self, rows: Range<usize>) -> Matrix {
        let m = &self.matrix;
        let data = if self.interleaved {
            let group_bytes = interleave::bytes(ROWS, m.cols);
            let mut data = Vec::new();
            let mut row = Vec::new();
            for r in rows.clone() {
                let group = &m.data[r / ROWS * group_bytes..][..group_bytes];
                interleave::row_of(group, m.cols, r % ROWS, &mut row);
                data.extend_from_slice(&row);
            }
            data
        } else {
            let row_bytes = m.data.len() / m.rows.max(1);
            m.data[rows.start * row_bytes..rows.end * row_bytes].to_vec()
        };
        Matrix {
            format: m.format,
            rows: rows.len(),
            cols: m.cols,
            data,
        }
    }
}

/// A projection's runs (one per format), each in the layout its products read.
#[derive(Clone, Debug)]
pub struct CpuProjection {
    pub runs: Vec<CpuMatrix>,
}

impl CpuProjection {
    /// `p`'s runs, each laid out as [`CpuMatrix::for_kernels`] chooses.
    pub fn for_kernels(k: &Kernels, mode: Activations, p: Projection, unit: usize) -> Self {
        Self {
            runs: p
                .runs
                .into_iter()
                .map(|m| CpuMatrix::for_kernels(k, mode, m, unit))
                .collect(),
        }
    }

    pub fn rows(&self) -> usize {
        self.runs.iter().map(|r| r.matrix.rows).sum()
    }
}
