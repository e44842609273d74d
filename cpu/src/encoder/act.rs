//! The MLP's activation in f32, fast: GELU's erf by Abramowitz and Stegun's 7.1.26 (within
//! 1.5e-7 of erf everywhere), one `expf` per value, where the reference computes erf in f64.

use hearth_model::encoder::EncoderActivation;

/// `act` of every value of `x`, in place.
pub(super) fn apply(act: EncoderActivation, x: &mut [f32]) {
    match act {
        EncoderActivation::Gelu => x.iter_mut().for_each(|v| *v = gelu_erf(*v)),
        EncoderActivation::GeluTanh => x.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
        EncoderActivation::Relu => x.iter_mut().for_each(|v| *v = v.max(0.0)),
    }
}

/// x * Phi(x) = x / 2 * (1 + erf(x / sqrt 2)).
fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2 / pi)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

/// erf by Abramowitz and Stegun 7.1.26: 1 - t (a1 + t (a2 + ...)) e^(-x^2), t = 1 / (1 + p x),
/// odd in x.
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152,
        1.061_405_4,
    ];
    let a = x.abs();
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let y = 1.0 - poly * (-a * a).exp();
    y.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the f64 GELU the reference computes (`hearth_model::ops::gelu`), over the range
    /// activations take: within 2e-7 of the value's size plus 1e-6 (erf's 1.5e-7, times x / 2).
    #[test]
    fn fast_gelu_is_the_exact_one() {
        let xs: Vec<f32> = (-12_000..=12_000).map(|i| i as f32 / 1000.0).collect();
        for exact in [true, false] {
            let want = hearth_model::ops::gelu(&xs, exact);
            let mut got = xs.clone();
            let act = match exact {
                true => EncoderActivation::Gelu,
                false => EncoderActivation::GeluTanh,
            };
            apply(act, &mut got);
            for ((x, g), w) in xs.iter().zip(&got).zip(&want) {
                assert!(
                    (g - w).abs() <= 2e-7 * w.abs() + 1e-6,
                    "{x}: {g} against {w}"
                );
            }
        }
    }
}
