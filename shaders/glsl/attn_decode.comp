#version 450
// Attention for decode: each new token against every cached position of its own sequence,
// read through the paged cache's block table (and beam table, for beam search).
// One workgroup per (query head, token); grouped-query attention maps query head h to KV head
// h / (n_head / n_head_kv), which each of its group's workgroups reads in place.
// Each invocation runs an online softmax over positions tid, tid + WG, ...; the partial
// (max, sum, weighted V) triples are then merged across the workgroup. A token at position
// pos attends to positions [0, pos], so this kernel also serves short multi-token steps and a
// batch of sequences (one token or a few each).
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "reduce.glsl"
#define KV_BINDING 2
#define KV_BEAMS
#include "kv_cache.glsl"
#define STEPS_BINDING 6
#include "attn_push.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint SUBGROUPS = 64;            // most subgroups in a workgroup
const uint HD4 = HEAD_DIM / 4;
layout(binding = 0) readonly buffer QKV { vec4 qkv[]; };      // [tokens, q_stride], queries first
layout(binding = 1) writeonly buffer O { vec4 o[]; };         // [tokens, n_head * head_dim]

shared vec4 qs[HD4];
shared vec4 merged[SUBGROUPS][HD4];

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = p.t0 + gl_WorkGroupID.y;
    uvec4 st = steps[t];
    uint kvh = h / (p.n_head / p.n_head_kv);
    uint n_kv = st.y + 1;
    uint tid = gl_LocalInvocationID.x;
    for (uint d = tid; d < HD4; d += WG) {
        qs[d] = qkv[(t * p.q_stride + h * HEAD_DIM) / 4 + d] * p.scale;
    }
    barrier();

    float m = -1e30;
    float l = 0.0;
    vec4 acc[HD4];
    for (uint d = 0; d < HD4; ++d) {
        acc[d] = vec4(0.0);
    }
    for (uint pos = tid; pos < n_kv; pos += WG) {
        uint slot = kv_slot(kv_row(st.x, st.z, pos), pos, p.max_blocks);
        uint kb = kv_index4(slot, kvh, p.n_head_kv, HEAD_DIM);
        float s = 0.0;
        for (uint d = 0; d < HD4; ++d) {
            s += dot(qs[d], k_cache[kb + d]);
        }
        float m_new = max(m, s);
        float c = exp(m - m_new);
        float e = exp(s - m_new);
        l = l * c + e;
        for (uint d = 0; d < HD4; ++d) {
            acc[d] = acc[d] * c + e * v_cache[kb + d];
        }
        m = m_new;
    }

    // Merge: rescale every partial to the workgroup's max, then sum.
    float m_all = workgroup_max(m);
    float f = exp(m - m_all);
    float l_all = workgroup_sum(l * f);
    for (uint d = 0; d < HD4; ++d) {
        vec4 v = subgroupAdd(acc[d] * f);
        if (subgroupElect()) {
            merged[gl_SubgroupID][d] = v;
        }
    }
    barrier();
    for (uint d = tid; d < HD4; d += WG) {
        vec4 sum = vec4(0.0);
        for (uint s = 0; s < gl_NumSubgroups; ++s) {
            sum += merged[s][d];
        }
        o[(t * p.n_head * HEAD_DIM + h * HEAD_DIM) / 4 + d] = sum / l_all;
    }
}
