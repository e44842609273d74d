//! Activations quantized once per product to 8-bit blocks, so that every weight row's dot
//! product with them is an integer dot product: each 32 values share an f32 scale `d` and
//! are rounded to `q` in -127..=127 (`x ~ q * d`). Each 16 values' sum of `q`, times `d`, is
//! kept beside them for the weights' bases (`value = level * d_w + m_w`: the `m_w` part of a
//! dot product is `m_w * sum(x)`).

/// How products take their activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Activations {
    /// Rounded to 8 bits per 32 values, integer dot products (as llama.cpp's CPU backend):
    /// the fast way, logits within about 1 of exact f32 on a small model.
    #[default]
    Q8,
    /// As they are, f32 multiply-adds of the dequantized weights: the Vulkan path's and the
    /// reference's precision, at a few times the cost.
    F32,
}

impl Activations {
    pub const ALL: [Activations; 2] = [Activations::Q8, Activations::F32];

    pub const fn name(self) -> &'static str {
        match self {
            Activations::Q8 => "q8",
            Activations::F32 => "f32",
        }
    }
}

impl std::str::FromStr for Activations {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Activations::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("{s:?} is not q8 or f32"))
    }
}

/// Values that share a scale.
pub const BLOCK: usize = 32;

/// `rows` rows of `cols` activations (`cols` a multiple of [`BLOCK`]), quantized: each value
/// rounded to the nearest level, ties to even (as llama.cpp's x86 kernels round).
#[derive(Clone, Debug, Default)]
pub struct ActQ8 {
    pub rows: usize,
    pub cols: usize,
    /// [rows, cols]
    pub q: Vec<i8>,
    /// [rows, cols]: `q + 128`, the unsigned operand of the products over unpacked panels
    /// (`crate::panel`), whose weights are the signed one.
    pub u: Vec<u8>,
    /// [rows, cols / 32]: each block's scale.
    pub d: Vec<f32>,
    /// [rows, cols / 16]: each 16 values' `sum(q) * d`.
    pub sums: Vec<f32>,
}

impl ActQ8 {
    /// Quantizes `x` ([rows, cols]) in place of what this held, reusing its memory: the
    /// definition, in plain Rust (`Kernels::quantize` gives the same values faster).
    pub fn quantize(&mut self, x: &[f32], cols: usize) {
        self.shape(x, cols);
        let blocks = x.chunks_exact(BLOCK).zip(self.q.chunks_exact_mut(BLOCK));
        let scales = self.d.iter_mut().zip(self.sums.chunks_exact_mut(2));
        for ((x, q), (d, sums)) in blocks.zip(scales) {
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            *d = amax / 127.0;
            let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
            for (q, &v) in q.iter_mut().zip(x) {
                *q = (v * inv).round_ties_even() as i8;
            }
            for (sum, half) in sums.iter_mut().zip(q.chunks_exact(16)) {
                *sum = half.iter().map(|&v| i32::from(v)).sum::<i32>() as f32 * *d;
            }
        }
        for (u, &q) in self.u.iter_mut().zip(&self.q) {
            *u = (q as u8) ^ 0x80;
        }
    }

    /// Sizes this for `x` ([rows, cols]).
    pub(crate) fn shape(&mut self, x: &[f32], cols: usize) {
        debug_assert!(cols.is_multiple_of(BLOCK) && x.len().is_multiple_of(cols));
        self.rows = x.len() / cols.max(1);
        self.cols = cols;
        self.q.resize(x.len(), 0);
        self.u.resize(x.len(), 0);
        self.d.resize(x.len() / BLOCK, 0.0);
        self.sums.resize(x.len() / 16, 0.0);
    }

    /// Row `r`: its values, scales and sums.
    pub fn row(&self, r: usize) -> ActRow<'_> {
        let c = self.cols;
        ActRow {
            q: &self.q[r * c..][..c],
            u: &self.u[r * c..][..c],
            d: &self.d[r * c / BLOCK..][..c / BLOCK],
            sums: &self.sums[r * c / 16..][..c / 16],
        }
    }
}

/// One row of [`ActQ8`].
#[derive(Clone, Copy, Debug)]
pub struct ActRow<'a> {
    pub q: &'a [i8],
    pub u: &'a [u8],
    pub d: &'a [f32],
    pub sums: &'a [f32],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_back_within_half_a_step() {
        let x: Vec<f32> = (0..96).map(|i| ((i * 37) % 23) as f32 - 11.3).collect();
        let mut a = ActQ8::default();
        a.quantize(&x, 32);
        assert_eq!((a.rows, a.d.len(), a.sums.len()), (3, 3, 6));
        for (i, &v) in x.iter().enumerate() {
            let d = a.d[i / 32];
            assert!(
                (f32::from(a.q[i]) * d - v).abs() <= d * 0.5 + 1e-6,
                "value {i}"
            );
        }
        assert!(a
            .q
            .iter()
            .zip(&a.u)
            .all(|(&q, &u)| i32::from(u) == i32::from(q) + 128));
        let sum: f32 = a.q[16..32].iter().map(|&q| f32::from(q)).sum();
        assert_eq!(a.sums[1], sum * a.d[0]);
    }

    #[test]
    fn a_block_of_zeros_has_scale_zero() {
        let mut a = ActQ8::default();
        a.quantize(&[0.0; 32], 32);
        assert_eq!(a.d, [0.0]);
        assert!(a.q.iter().all(|&q| q == 0));
    }
}
