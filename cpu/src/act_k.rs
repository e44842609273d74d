//! Activations for the k-quants' decode products, quantized as llama.cpp's Q8_K: each 256
//! values (one k-quant super-block) share one f32 scale and are rounded to -127..=127, with
//! each 16 values' integer sum beside them. One scale per super-block keeps a row's whole
//! super-block in integers: the weights' 6-bit sub-block scales multiply 16-bit partial sums
//! (`vpmaddwd`, or AVX-VNNI's `vpdpwssd`), and only the super-block's total meets a float.

/// Values that share a scale.
pub const SUPER: usize = 256;

/// `rows` rows of `cols` activations (`cols` a multiple of [`SUPER`]), quantized.
#[derive(Clone, Debug, Default)]
pub struct ActK {
    pub rows: usize,
    pub cols: usize,
    /// [rows, cols]
    pub q: Vec<i8>,
    /// [rows, cols / 256]: each super-block's scale.
    pub d: Vec<f32>,
    /// [rows, cols / 16]: each 16 values' sum of `q`.
    pub sums: Vec<i16>,
}

impl ActK {
    /// Quantizes `x` ([rows, cols]) in place of what this held: `d = max |x| / 127`, each
    /// value rounded to the nearest level, ties to even.
    pub fn quantize(&mut self, x: &[f32], cols: usize) {
        debug_assert!(cols.is_multiple_of(SUPER) && x.len().is_multiple_of(cols));
        self.rows = x.len() / cols.max(1);
        self.cols = cols;
        self.q.resize(x.len(), 0);
        self.d.resize(x.len() / SUPER, 0.0);
        self.sums.resize(x.len() / 16, 0);
        let supers = x.chunks_exact(SUPER).zip(self.q.chunks_exact_mut(SUPER));
        let scales = self
            .d
            .iter_mut()
            .zip(self.sums.chunks_exact_mut(SUPER / 16));
        for ((x, q), (d, sums)) in supers.zip(scales) {
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            *d = amax / 127.0;
            let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
            for (q, &v) in q.iter_mut().zip(x) {
                *q = (v * inv).round_ties_even() as i8;
            }
            for (sum, part) in sums.iter_mut().zip(q.chunks_exact(16)) {
                *sum = part.iter().map(|&v| i16::from(v)).sum();
            }
        }
    }

    /// Row `r`.
    pub fn row(&self, r: usize) -> ActKRow<'_> {
        let c = self.cols;
        ActKRow {
            q: &self.q[r * c..][..c],
            d: &self.d[r * c / SUPER..][..c / SUPER],
            sums: &self.sums[r * c / 16..][..c / 16],
        }
    }
}

/// One row of [`ActK`].
#[derive(Clone, Copy, Debug)]
pub struct ActKRow<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub sums: &'a [i16],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_within_half_a_step_and_sums_add_up() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 37) % 101) as f32 / 7.0 - 7.1)
            .collect();
        let mut a = ActK::default();
        a.quantize(&x, 256);
        assert_eq!((a.rows, a.d.len(), a.sums.len()), (2, 2, 32));
        for (i, &v) in x.iter().enumerate() {
            let d = a.d[i / 256];
            assert!(
                (f32::from(a.q[i]) * d - v).abs() <= d * 0.5 + 1e-6,
                "value {i}"
            );
        }
        let sum: i16 = a.q[16..32].iter().map(|&q| i16::from(q)).sum();
        assert_eq!(a.sums[1], sum);
        let mut zeros = ActK::default();
        zeros.quantize(&[0.0; 256], 256);
        assert_eq!(zeros.d, [0.0]);
    }
}
