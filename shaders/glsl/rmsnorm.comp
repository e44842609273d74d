#version 450
// RMSNorm over rows: y = x / sqrt(mean(x^2) + eps) * w, or with p.accumulate y += that (the
// residual add of a block whose output is normed: Gemma 2's post-norms). One workgroup per
// row.
#include "common.glsl"
#include "reduce.glsl"

layout(binding = 0) readonly buffer X { float x[]; };   // [rows, n]
layout(binding = 1) readonly buffer W { float w[]; };   // [n]
layout(binding = 2) buffer Y { float y[]; };            // [rows, n]
layout(push_constant) uniform Push { uint n; float eps; uint accumulate; } p;

void main() {
    uint base = gl_WorkGroupID.x * p.n;
    float ss = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        float v = x[base + i];
        ss += v * v;
    }
    float scale = inversesqrt(workgroup_sum(ss) / float(p.n) + p.eps);
    for (uint i = gl_LocalInvocationID.x; i < p.n; i += WG) {
        float v = x[base + i] * scale * w[i];
        y[base + i] = p.accumulate != 0u ? y[base + i] + v : v;
    }
}
