#version 450
// LayerNorm over rows: y = (x - mean) / sqrt(var + eps) * w + b. One workgroup per row.
// Two passes (mean, then centred variance) so large offsets do not cancel.
#include "common.glsl"
#include "reduce.glsl"

layout(binding = 0) readonly buffer X { float x[]; };   // [rows, n]
layout(binding = 1) readonly buffer W { float w[]; };   // [n]
layout(binding = 2) readonly buffer B { float b[]; };   // [n]
layout(binding = 3) writeonly buffer Y { float y[]; };  // [rows, n]
layout(push_constant) uniform Push { uint n; float eps; } p;

void main() {
    uint base = gl_WorkGroupID.x * p.n;
    float s = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        s += x[base + i];
    }
    float mean = workgroup_sum(s) / float(p.n);
    float ss = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        float d = x[base + i] - mean;
        ss += d * d;
    }
    float inv = inversesqrt(workgroup_sum(ss) / float(p.n) + p.eps);
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        y[base + i] = (x[base + i] - mean) * inv * w[i] + b[i];
    }
}
