#version 450
// A linear layer's output finished in place: y[t, c] = act(y[t, c] + bias[c]) over rows of
// `cols` values (an encoder's biases, and its MLP's activation). act: 0 none (the bias
// only), 1 GELU with erf (BERT), 2 GELU's tanh form (GPT-2), 3 ReLU.
#include "common.glsl"
#include "gelu.glsl"

layout(binding = 0) buffer Y { float y[]; };                 // [rows, cols]
layout(binding = 1) readonly buffer Bias { float bias[]; };  // [cols]
layout(push_constant) uniform Push { uint n; uint cols; uint act; } p;

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    float v = y[i] + bias[i % p.cols];
    switch (p.act) {
        case 1u: v = gelu_erf(v); break;
        case 2u: v = gelu_tanh(v); break;
        case 3u: v = max(v, 0.0); break;
        default: break;
    }
    y[i] = v;
}
