#version 450
// Row softmax of scale * x, numerically stable (the row maximum is subtracted before exp).
// One workgroup per row.
#include "common.glsl"
#include "reduce.glsl"

layout(binding = 0) readonly buffer X { float x[]; };   // [rows, n]
layout(binding = 1) writeonly buffer Y { float y[]; };  // [rows, n]
layout(push_constant) uniform Push { uint n; float scale; } p;

void main() {
    uint base = gl_WorkGroupID.x * p.n;
    float m = -3.402823466e38;
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        m = max(m, p.scale * x[base + i]);
    }
    m = workgroup_max(m);
    float s = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        s += exp(p.scale * x[base + i] - m);
    }
    float inv = 1.0 / workgroup_sum(s);
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        y[base + i] = exp(p.scale * x[base + i] - m) * inv;
    }
}
