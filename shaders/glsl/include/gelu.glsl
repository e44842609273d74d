// GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2, Gemma).
// The argument is clamped so tanh's exponentials cannot overflow; tanh(15) is 1 in f32.
float gelu_tanh(float v) {
    float u = clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -15.0, 15.0);
    return 0.5 * v * (1.0 + tanh(u));
}

// Abramowitz & Stegun 7.1.26: |error| < 1.5e-7. GLSL has no erf.
float erf_approx(float v) {
    float s = sign(v);
    float a = abs(v);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
               + t * (-1.453152027 + t * 1.061405429))));
    return s * (1.0 - poly * exp(-a * a));
}

// GELU as x * Phi(x), with erf (BERT's `gelu`).
float gelu_erf(float v) {
    return 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752));
}
