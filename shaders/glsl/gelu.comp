#version 450
// GELU, elementwise. exact = 1: x * Phi(x) with erf (BERT); exact = 0: the tanh form (GPT-2).
#include "common.glsl"
#include "gelu.glsl"

layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { uint n; uint exact; } p;

// Abramowitz & Stegun 7.1.26: |error| < 1.5e-7. GLSL has no erf.
float erf_approx(float v) {
    float s = sign(v);
    float a = abs(v);
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
               + t * (-1.453152027 + t * 1.061405429))));
    return s * (1.0 - poly * exp(-a * a));
}

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    float v = x[i];
    if (p.exact != 0) {
        y[i] = 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752));
    } else {
        y[i] = gelu_tanh(v);
    }
}
