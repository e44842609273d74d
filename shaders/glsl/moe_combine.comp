#version 450
// A mixture of experts' output: each token's experts' outputs summed with the router's
// weights, out[t, c] (+)= sum_j weights[t * used + j] * y[t * used + j, c]. With p.biased,
// each slot's expert's down-projection bias joins its output first:
// y[s, c] + bias[experts[s] * n + c] (GPT-OSS).
#include "common.glsl"

layout(binding = 0) readonly buffer Y { float y[]; };          // [tokens * used, n]
layout(binding = 1) readonly buffer W { float weights[]; };    // [tokens * used]
layout(binding = 2) buffer O { float outv[]; };                // [tokens, n]
layout(binding = 3) readonly buffer B { float bias[]; };       // [n_expert * n], p.biased
layout(binding = 4) readonly buffer E { uint experts[]; };     // [tokens * used], p.biased
layout(push_constant) uniform Push { uint tokens; uint n; uint used; uint accumulate; uint biased; } p;

void main() {
    uint i = linear_index();
    if (i >= p.tokens * p.n) {
        return;
    }
    uint t = i / p.n;
    uint c = i % p.n;
    float sum = 0.0;
    for (uint j = 0; j < p.used; ++j) {
        uint s = t * p.used + j;
        float v = y[s * p.n + c];
        if (p.biased != 0u) {
            v += bias[experts[s] * p.n + c];
        }
        sum += weights[s] * v;
    }
    outv[i] = p.accumulate != 0u ? outv[i] + sum : sum;
}
