//! RoPE tensors that llama.cpp's converter computes from `config.json` rather than copies:
//! Llama 3.1's per-pair frequency divisors (`rope_freqs.weight`).

/// Llama 3.1's `rope_scaling` of type `llama3`: frequencies whose wavelength exceeds the
/// original context / `low_freq_factor` are divided by `factor`, those below original /
/// `high_freq_factor` kept, and those between blended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_context: usize,
}

impl Llama3Rope {
    /// Llama 3.1 and 3.2's published values.
    pub const LLAMA_3_1: Llama3Rope = Llama3Rope {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 8192,
    };

    /// The divisor of each rotated pair's frequency, as llama.cpp's converter writes them to
    /// `rope_freqs.weight`.
    pub fn factors(&self, dims: usize, base: f32) -> Vec<f32> {
        let original = self.original_context as f64;
        let low_wavelen = original / self.low_freq_factor as f64;
        let high_wavelen = original / self.high_freq_factor as f64;
        (0..dims / 2)
            .map(|i| {
                let freq = (base as f64).powf(-2.0 * i as f64 / dims as f64);
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                let divisor = if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    self.factor as f64
                } else {
                    let (low, high) = (self.low_freq_factor as f64, self.high_freq_factor as f64);
                    let smooth = (original / wavelen - low) / (high - low);
                    1.0 / ((1.0 - smooth) / self.factor as f64 + smooth)
                };
                divisor as f32
            })
            .collect()
    }
}
