#version 450
// Gated activation: out[t, c] = act(gate[t, c]) * up[t, c] over `tokens` rows of `cols` values,
// act SiLU (SwiGLU: Llama, Qwen) or, with p.gelu, GELU's tanh form (GeGLU: Gemma).
// Rows of the inputs are `stride` apart and up starts `up_offset` into its buffer, so gate and
// up may be two buffers or the two halves of one fused [tokens, 2 * cols] projection output.
#include "common.glsl"
#include "gelu.glsl"

layout(binding = 0) readonly buffer G { float gate[]; };
layout(binding = 1) readonly buffer U { float up[]; };
layout(binding = 2) writeonly buffer O { float outv[]; };     // [tokens, cols]
layout(push_constant) uniform Push { uint n; uint cols; uint stride; uint up_offset; uint gelu; } p;

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    uint src = (i / p.cols) * p.stride + i % p.cols;
    float g = gate[src];
    float a = p.gelu != 0u ? gelu_tanh(g) : g / (1.0 + exp(-g));
    outv[i] = a * up[src + p.up_offset];
}
