//! The bytes of each tensor: ordinary numbers at the scale of trained weights, drawn from
//! fixed seeds so that a shape always builds the same file.

use hearth_quant::Format;
use rand::{Rng, SeedableRng};

use super::tensors::{TensorPlan, Values};

impl TensorPlan {
    /// The tensor's bytes: ones for a norm gain; for a matrix, one row of values uniform in
    /// ±1/sqrt(n_in) (the scale of trained weights), quantized once and repeated, or with a
    /// seed every row drawn afresh.
    pub(super) fn data(
        &self,
        format: Format,
        seed: Option<u64>,
    ) -> std::result::Result<Vec<u8>, String> {
        let uniform = |seed, range: std::ops::RangeInclusive<f32>| -> Vec<f32> {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            (0..self.n_in)
                .map(|_| rng.gen_range(range.clone()))
                .collect()
        };
        let vector: Option<Vec<f32>> = match (self.kind, seed) {
            (Values::Bias, Some(seed)) => Some(uniform(seed, -0.5..=0.5)),
            (Values::Bias, None) => Some(vec![0.0; self.n_in]),
            (Values::VariedGain, Some(seed)) => Some(uniform(seed, 0.5..=1.5)),
            _ => None,
        };
        if let Some(values) = vector {
            return Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect());
        }
        let seed = match self.kind {
            Values::VariedMatrix => Some(seed.unwrap_or(self.n_in as u64 ^ self.n_out as u64)),
            _ => seed,
        };
        if let (Some(seed), true) = (seed, self.n_out > 1) {
            let scale = 1.0 / (self.n_in as f32).sqrt();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let format = self.format(format);
            let values: Vec<f32> = (0..self.n_in * self.n_out)
                .map(|_| rng.gen_range(-scale..=scale))
                .collect();
            let bytes = format.bytes_for(values.len()).ok_or_else(|| {
                format!("rows of {} values do not fill {format} blocks", self.n_in)
            })?;
            let mut packed = vec![0u8; bytes];
            format
                .quantize(&values, &mut packed)
                .map_err(|e| e.to_string())?;
            return Ok(packed);
        }
        let row: Vec<f32> = if self.n_out == 1 {
            vec![1.0; self.n_in]
        } else {
            let scale = 1.0 / (self.n_in as f32).sqrt();
            let mut rng = rand::rngs::StdRng::seed_from_u64(self.n_in as u64);
            (0..self.n_in)
                .map(|_| rng.gen_range(-scale..=scale))
                .collect()
        };
        let format = self.format(format);
        let row_bytes = format
            .bytes_for(self.n_in)
            .ok_or_else(|| format!("rows of {} values do not fill {format} blocks", self.n_in))?;
        let mut packed = vec![0u8; row_bytes];
        format
            .quantize(&row, &mut packed)
            .map_err(|e| e.to_string())?;
        let total = row_bytes
            .checked_mul(self.n_out)
            .ok_or_else(|| format!("{} rows of {row_bytes} bytes overflow", self.n_out))?;
        let mut data = Vec::new();
        data.try_reserve_exact(total)
            .map_err(|e| format!("{total} bytes: {e}"))?;
        for _ in 0..self.n_out {
            data.extend_from_slice(&packed);
        }
        Ok(data)
    }
}
