#version 450
// Gated activation: out[t, c] = act(gate[t, c]) * up[t, c] over `tokens` rows of `cols` values.
// act (p.act): 0 SiLU (SwiGLU: Llama, Qwen), 1 GELU's tanh form (GeGLU: Gemma), 2 GPT-OSS's
// clamped SwiGLU: the gate clamped above at p.limit, up to [-p.limit, p.limit], then
// (up + 1) * gate * sigmoid(p.alpha * gate).
// Rows of the inputs are `stride` apart and up starts `up_offset` into its buffer, so gate and
// up may be two buffers or the two halves of one fused [tokens, 2 * cols] projection output.
// With p.biased, each row is a slot of a mixture of experts (the fused layout): the biases of
// its expert, experts[t], are added to gate and up first; bias holds expert e's gate biases
// at e * 2 cols, then its up biases.
#include "common.glsl"
#include "gelu.glsl"

layout(binding = 0) readonly buffer G { float gate[]; };
layout(binding = 1) readonly buffer U { float up[]; };
layout(binding = 2) writeonly buffer O { float outv[]; };     // [tokens, cols]
layout(binding = 3) readonly buffer B { float bias[]; };      // [n_expert * 2 cols], p.biased
layout(binding = 4) readonly buffer E { uint experts[]; };    // [tokens], p.biased
layout(push_constant) uniform Push {
    uint n;
    uint cols;
    uint stride;
    uint up_offset;
    uint act;
    uint biased;
    float alpha;
    float limit;
} p;

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    uint t = i / p.cols;
    uint c = i % p.cols;
    uint src = t * p.stride + c;
    float g = gate[src];
    float u = up[src + p.up_offset];
    if (p.biased != 0u) {
        uint b = experts[t] * 2u * p.cols + c;
        g += bias[b];
        u += bias[b + p.cols];
    }
    if (p.act == 2u) {
        g = min(g, p.limit);
        u = clamp(u, -p.limit, p.limit);
        outv[i] = (u + 1.0) * (g / (1.0 + exp(-g * p.alpha)));
    } else {
        float a = p.act == 1u ? gelu_tanh(g) : g / (1.0 + exp(-g));
        outv[i] = a * u;
    }
}
