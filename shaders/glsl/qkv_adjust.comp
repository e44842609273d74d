#version 450
// The q/k/v projection's output adjusted in place before RoPE: biases added (Qwen2), then an
// RMSNorm over each query head and each key head with gains of one head's width (Qwen3).
// One workgroup per (token, head); heads are [n_head query | n_head_kv key | n_head_kv value].
#include "common.glsl"
#include "reduce.glsl"

layout(binding = 0) buffer Qkv { float qkv[]; };           // [tokens, heads * head_dim]
layout(binding = 1) readonly buffer Bias { float bias[]; }; // [heads * head_dim]
layout(binding = 2) readonly buffer QGain { float q_gain[]; }; // [head_dim]
layout(binding = 3) readonly buffer KGain { float k_gain[]; }; // [head_dim]
layout(push_constant) uniform Push {
    uint heads;      // n_head + 2 n_head_kv
    uint q_heads;    // n_head
    uint normed;     // heads normalised: n_head + n_head_kv, or 0 without the norm
    uint head_dim;
    uint has_bias;
    float eps;
} p;

void main() {
    uint head = gl_WorkGroupID.x % p.heads;
    uint base = gl_WorkGroupID.x * p.head_dim;
    uint bias_base = head * p.head_dim;
    if (p.has_bias != 0) {
        for (uint i = gl_LocalInvocationID.x; i < p.head_dim; i += WG) {
            qkv[base + i] += bias[bias_base + i];
        }
    }
    // Uniform per workgroup: every lane takes the same branch.
    if (head >= p.normed) {
        return;
    }
    float ss = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.head_dim; i += WG) {
        float v = qkv[base + i];
        ss += v * v;
    }
    float scale = inversesqrt(workgroup_sum(ss) / float(p.head_dim) + p.eps);
    bool is_q = head < p.q_heads;
    for (uint i = gl_LocalInvocationID.x; i < p.head_dim; i += WG) {
        float g = is_q ? q_gain[i] : k_gain[i];
        qkv[base + i] = qkv[base + i] * scale * g;
    }
}
