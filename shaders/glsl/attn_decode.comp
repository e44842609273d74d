#version 450
// Attention for decode: one new query per sequence against every cached position.
// One workgroup per (query head, token); grouped-query attention maps query head h to KV head
// h / (n_head / n_head_kv), which each of its group's workgroups reads in place.
// Each invocation runs an online softmax over positions tid, tid + WG, ...; the partial
// (max, sum, weighted V) triples are then merged across the workgroup. Token t of the batch
// attends to positions [0, pos0 + t], so this kernel also serves short multi-token steps.
#include "common.glsl"
#include "reduce.glsl"
#define KV_BINDING 2
#include "kv_cache.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint SUBGROUPS = 64;            // most subgroups in a workgroup
layout(binding = 0) readonly buffer QKV { float qkv[]; };     // [tokens, q_stride], queries first
layout(binding = 1) writeonly buffer O { float o[]; };        // [tokens, n_head * head_dim]
layout(push_constant) uniform Push {
    uint tokens;    // = gl_NumWorkGroups.y
    uint n_head;
    uint n_head_kv;
    uint pos0;
    uint q_stride;
    float scale;
} p;

shared float qs[HEAD_DIM];
shared float merged[SUBGROUPS][HEAD_DIM];

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    uint kvh = h / (p.n_head / p.n_head_kv);
    uint n_kv = p.pos0 + t + 1;
    uint tid = gl_LocalInvocationID.x;
    for (uint d = tid; d < HEAD_DIM; d += WG) {
        qs[d] = qkv[t * p.q_stride + h * HEAD_DIM + d] * p.scale;
    }
    barrier();

    float m = -1e30;
    float l = 0.0;
    float acc[HEAD_DIM];
    for (uint d = 0; d < HEAD_DIM; ++d) {
        acc[d] = 0.0;
    }
    for (uint pos = tid; pos < n_kv; pos += WG) {
        uint kb = kv_index(pos, kvh, p.n_head_kv, HEAD_DIM);
        float s = 0.0;
        for (uint d = 0; d < HEAD_DIM; ++d) {
            s += qs[d] * k_cache[kb + d];
        }
        float m_new = max(m, s);
        float c = exp(m - m_new);
        float e = exp(s - m_new);
        l = l * c + e;
        for (uint d = 0; d < HEAD_DIM; ++d) {
            acc[d] = acc[d] * c + e * v_cache[kb + d];
        }
        m = m_new;
    }

    // Merge: rescale every partial to the workgroup's max, then sum.
    float m_all = workgroup_max(m);
    float f = exp(m - m_all);
    float l_all = workgroup_sum(l * f);
    for (uint d = 0; d < HEAD_DIM; ++d) {
        float v = subgroupAdd(acc[d] * f);
        if (subgroupElect()) {
            merged[gl_SubgroupID][d] = v;
        }
    }
    barrier();
    for (uint d = tid; d < HEAD_DIM; d += WG) {
        float sum = 0.0;
        for (uint s = 0; s < gl_NumSubgroups; ++s) {
            sum += merged[s][d];
        }
        o[t * p.n_head * HEAD_DIM + h * HEAD_DIM + d] = sum / l_all;
    }
}
