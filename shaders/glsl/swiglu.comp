#version 450
// SwiGLU gate: out = silu(gate) * up, elementwise.
#include "common.glsl"

layout(binding = 0) readonly buffer G { float gate[]; };
layout(binding = 1) readonly buffer U { float up[]; };
layout(binding = 2) writeonly buffer O { float outv[]; };
layout(push_constant) uniform Push { uint n; } p;

void main() {
    uint i = linear_index();
    if (i >= p.n) {
        return;
    }
    float g = gate[i];
    outv[i] = g / (1.0 + exp(-g)) * up[i];
}
