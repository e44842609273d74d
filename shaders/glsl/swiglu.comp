#version 450
// SwiGLU gate: out[t, c] = silu(gate[t, c]) * up[t, c] over `tokens` rows of `cols` values.
// Rows of the inputs are `stride` apart and up starts `up_offset` into its buffer, so gate and
// up may be two buffers or the two halves of one fused [tokens, 2 * cols] projection output.
#include "common.glsl"

layout(binding = 0) readonly buffer G { float gate[]; };
layout(binding = 1) readonly buffer U { float up[]; };
layout(binding = 2) writeonly buffer O { float outv[]; };     // [tokens, cols]
layout(push_constant) uniform Push { uint n; uint cols; uint stride; uint up_offset; } p;

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    uint src = (i / p.cols) * p.stride + i % p.cols;
    float g = gate[src];
    outv[i] = g / (1.0 + exp(-g)) * up[src + p.up_offset];
}
