#version 450
// The q/k/v projection's output adjusted in place before RoPE: biases added (Qwen2), then an
// RMSNorm over each query head and each key head with gains of one head's width (Qwen3), or
// with `whole` over all the queries and all the keys, gains of those widths (OLMoE).
// One workgroup per (token, head), or with `whole` per (token, part) of the parts q, k, v;
// heads are [n_head query | n_head_kv key | n_head_kv value].
#include "common.glsl"
#include "reduce.glsl"

layout(binding = 0) buffer Qkv { float qkv[]; };           // [tokens, heads * head_dim]
layout(binding = 1) readonly buffer Bias { float bias[]; }; // [heads * head_dim]
layout(binding = 2) readonly buffer QGain { float q_gain[]; }; // [head_dim] or [n_head * head_dim]
layout(binding = 3) readonly buffer KGain { float k_gain[]; }; // [head_dim] or [n_head_kv * head_dim]
layout(push_constant) uniform Push {
    uint heads;      // n_head + 2 n_head_kv
    uint q_heads;    // n_head
    uint normed;     // heads normalised: n_head + n_head_kv, or 0 without the norm
    uint head_dim;
    uint has_bias;
    float eps;
    uint whole;
} p;

void main() {
    // This workgroup's values: `width` of them from `start` in the token's row.
    uint token;
    uint start;
    uint width;
    bool normed;
    bool is_q;
    if (p.whole != 0u) {
        uint part = gl_WorkGroupID.x % 3u;
        uint q_dim = p.q_heads * p.head_dim;
        uint kv_dim = (p.heads - p.q_heads) / 2u * p.head_dim;
        token = gl_WorkGroupID.x / 3u;
        start = part == 0u ? 0u : q_dim + (part - 1u) * kv_dim;
        width = part == 0u ? q_dim : kv_dim;
        normed = part < 2u && p.normed != 0u;
        is_q = part == 0u;
    } else {
        uint head = gl_WorkGroupID.x % p.heads;
        token = gl_WorkGroupID.x / p.heads;
        start = head * p.head_dim;
        width = p.head_dim;
        normed = head < p.normed;
        is_q = head < p.q_heads;
    }
    uint base = token * p.heads * p.head_dim + start;
    if (p.has_bias != 0) {
        for (uint i = gl_LocalInvocationID.x; i < width; i += WG) {
            qkv[base + i] += bias[start + i];
        }
    }
    // Uniform per workgroup: every lane takes the same branch.
    if (!normed) {
        return;
    }
    float ss = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < width; i += WG) {
        float v = qkv[base + i];
        ss += v * v;
    }
    float scale = inversesqrt(workgroup_sum(ss) / float(width) + p.eps);
    for (uint i = gl_LocalInvocationID.x; i < width; i += WG) {
        float g = is_q ? q_gain[i] : k_gain[i];
        qkv[base + i] = qkv[base + i] * scale * g;
    }
}
