//! Sums of squared inputs to each weight matrix, collected while the reference runs: what an
//! importance matrix is made of (`quantize::imatrix`). A column whose inputs are large moves
//! the product most, so quantization should spend its precision there.

/// Per input column, the sum of its squared values over every token seen, and how many tokens.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SquareSums {
    pub sums: Vec<f64>,
    pub tokens: u64,
}

impl SquareSums {
    /// Adds the rows of `x` (tokens of `cols` values each).
    pub fn add(&mut self, x: &[f32], cols: usize) {
        if self.sums.len() != cols {
            self.sums = vec![0.0; cols];
        }
        for row in x.chunks_exact(cols) {
            for (s, &v) in self.sums.iter_mut().zip(row) {
                *s += f64::from(v) * f64::from(v);
            }
            self.tokens += 1;
        }
    }
}

/// The inputs of one layer's matrices: the normalized attention input (Q, K and V read it),
/// the attention output (the output projection's input), the normalized MLP input (gate and
/// up) and the MLP's hidden activations (down).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerActivations {
    pub qkv: SquareSums,
    pub attn_output: SquareSums,
    pub gate_up: SquareSums,
    pub down: SquareSums,
}

/// Every layer's, and the output head's input.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Activations {
    pub layers: Vec<LayerActivations>,
    pub output: SquareSums,
}

impl Activations {
    pub fn new(n_layer: usize) -> Self {
        Self {
            layers: vec![LayerActivations::default(); n_layer],
            output: SquareSums::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_of_squares_per_column() {
        let mut s = SquareSums::default();
        s.add(&[1.0, -2.0, 3.0, 0.5], 2);
        s.add(&[-1.0, 0.0], 2);
        assert_eq!(s.sums, [1.0 + 9.0 + 1.0, 4.0 + 0.25]);
        assert_eq!(s.tokens, 3);
    }
}
