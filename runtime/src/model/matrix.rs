//! A weight matrix as the device stores it: packed blocks of one `hearth-quant` format.
//!
//! GGUF tensors already in a Hearth format (F32, F16, Q4_1 = Q4, Q8_0 = Q8, and Hearth's
//! private formats) are used byte for byte; other GGUF types are dequantized and requantized
//! once at load into the format that keeps them best (see [`import_format`]).

use hearth_quant::{BlockType, Format};

use crate::kernels::shader_block;

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

    /// This matrix in another format (through f32).
    pub fn convert(&self, format: Format) -> hearth_quant::Result<Self> {
        if format == self.format {
            return Ok(self.clone());
        }
        Self::quantize(format, self.rows, self.cols, &self.to_f32())
    }

    /// The rows of `parts` one after another (a fused projection). Parts in different formats
    /// are first brought to the one with the most bits per weight.
    pub fn concat_rows(parts: Vec<Matrix>) -> hearth_quant::Result<Self> {
        let format = parts
            .iter()
            .map(|p| p.format)
            .max_by(|a, b| a.bits_per_weight().total_cmp(&b.bits_per_weight()))
            .unwrap_or(Format::F32);
        let cols = parts.first().map_or(0, |p| p.cols);
        let mut rows = 0;
        let mut data = Vec::new();
        for part in parts {
            let part = if part.format == format {
                part
            } else {
                part.convert(format)?
            };
            rows += part.rows;
            data.extend_from_slice(&part.data);
        }
        Ok(Self {
            format,
            rows,
            cols,
            data,
        })
    }
}

/// The Hearth format a GGUF type is loaded as. Types that are Hearth formats (the k-quants
/// among them) stay as they are; the others go to the format with at least their precision,
/// so conversion loses little: Q4_0 to Q4, Q5_0 to Q5, Q5_1 to Q6, BF16 to F16.
pub fn import_format(ty: BlockType) -> Format {
    use BlockType::*;
    if let Some(native) = ty.format() {
        return native;
    }
    match ty {
        Q4_0 => Format::Q4,
        Q5_0 => Format::Q5,
        Q5_1 => Format::Q6,
        F32 | F16 | BF16 | Q4_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K => Format::F16,
    }
}

/// The format rows of `cols` values load as: `preferred`, or where its blocks do not fit the
/// rows, the format [`Format::fitting`] chooses (the quantizer's rule too); `None` when rows
/// are not a multiple of 32 values, which no kernel reads.
pub fn fitting_format(preferred: Format, cols: usize) -> Option<Format> {
    let format = preferred.fitting(cols);
    (cols as u64 % shader_block(format) == 0).then_some(format)
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
    fn fused_parts_in_different_formats_meet_at_the_widest() {
        let values: Vec<f32> = (0..64 * 3).map(|i| (i as f32 * 0.37).sin()).collect();
        let a = Matrix::quantize(Format::Q4, 2, 64, &values[..128]).unwrap();
        let b = Matrix::quantize(Format::Q8, 1, 64, &values[128..]).unwrap();
        let fused = Matrix::concat_rows(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!((fused.format, fused.rows, fused.cols), (Format::Q8, 3, 64));
        assert_eq!(fused.to_f32()[128..], b.to_f32()[..]);
        let same = Matrix::concat_rows(vec![a.clone(), a.clone()]).unwrap();
        assert_eq!(same.data, [a.data.clone(), a.data].concat());
    }

    #[test]
    fn formats_fall_back_to_blocks_that_fit() {
        assert_eq!(fitting_format(Format::Q3H, 576), Some(Format::Q3H));
        assert_eq!(fitting_format(Format::Q3H, 96), Some(Format::Q3));
        assert_eq!(fitting_format(Format::Q6, 96), Some(Format::Q8));
        assert_eq!(fitting_format(Format::F16, 40), None);
        assert_eq!(fitting_format(Format::Q4, 40), None);
        assert_eq!(import_format(BlockType::Q4_1), Format::Q4);
        assert_eq!(import_format(BlockType::Q6_K), Format::Q6_K);
        assert_eq!(fitting_format(Format::Q6_K, 576), Some(Format::Q8));
    }
}
