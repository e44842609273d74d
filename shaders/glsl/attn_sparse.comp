#version 450
// Decode attention over InfiniGen's selection: the current token of one row attends to the
// history positions gathered into k_scratch / v_scratch (sel_count[g] of them, in stored
// order) and then to its own position `pos`, read from the paged pool where rope_kv stored
// it. One workgroup per query head; the online softmax and merge are attn_decode.comp's, so
// with every position selected in ascending order both kernels do the same arithmetic. So
// is the split over workgroups along z when p.splits > 1 (include/attn_split.glsl).
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "reduce.glsl"
#define KV_BINDING 2
#define KV_READ_ONLY
#include "kv_cache.glsl"
#include "ig_push.glsl"
#include "attn_split.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint SUBGROUPS = 64;             // most subgroups in a workgroup
const uint HD4 = HEAD_DIM / 4;
layout(binding = 0) readonly buffer Q { vec4 q[]; };           // [tokens, q_stride], post-RoPE
layout(binding = 1) writeonly buffer O { vec4 o[]; };          // [tokens, n_head * head_dim]
layout(binding = 5) readonly buffer KS { vec4 k_scratch[]; };  // [n_kv, cap, head_dim]
layout(binding = 6) readonly buffer VS { vec4 v_scratch[]; };  // [n_kv, cap, head_dim]
layout(binding = 7) readonly buffer Count { uint sel_count[]; }; // [n_kv]
layout(binding = 8) writeonly buffer Part { vec4 part[]; };    // splits > 1: the partials

shared vec4 qs[HD4];
shared vec4 merged[SUBGROUPS][HD4];

void main() {
    uint h = gl_WorkGroupID.x;
    uint kvh = h / (p.n_head / p.n_head_kv);
    uint tid = gl_LocalInvocationID.x;
    for (uint d = tid; d < HD4; d += WG) {
        qs[d] = q[(p.token * p.q_stride + h * HEAD_DIM) / 4 + d] * p.scale;
    }
    barrier();

    uint count = min(sel_count[kvh], p.cap);
    uint own = kv_index4(kv_slot(p.row, p.pos, p.max_blocks), kvh, p.n_head_kv, HEAD_DIM);
    float m = -1e30;
    float l = 0.0;
    vec4 acc[HD4];
    for (uint d = 0; d < HD4; ++d) {
        acc[d] = vec4(0.0);
    }
    // Entries 0 .. count: the selection, then the token's own position.
    uint z = gl_WorkGroupID.z;
    uint len = p.splits > 1 ? split_len(count + 1, p.splits) : count + 1;
    uint end = min(count + 1, (z + 1) * len);
    for (uint j = z * len + tid; j < end; j += WG) {
        bool current = j == count;
        uint kb = current ? own : (kvh * p.cap + j) * HD4;
        float s = 0.0;
        for (uint d = 0; d < HD4; ++d) {
            s += dot(qs[d], current ? k_cache[kb + d] : k_scratch[kb + d]);
        }
        float m_new = max(m, s);
        float c = exp(m - m_new);
        float e = exp(s - m_new);
        l = l * c + e;
        for (uint d = 0; d < HD4; ++d) {
            acc[d] = acc[d] * c + e * (current ? v_cache[kb + d] : v_scratch[kb + d]);
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
    uint slot = (h * p.splits + z) * (HD4 + 1);
    for (uint d = tid; d < HD4; d += WG) {
        vec4 sum = vec4(0.0);
        for (uint s = 0; s < gl_NumSubgroups; ++s) {
            sum += merged[s][d];
        }
        if (p.splits > 1) {
            part[slot + d] = sum;
        } else {
            o[(p.token * p.n_head * HEAD_DIM + h * HEAD_DIM) / 4 + d] = sum / l_all;
        }
    }
    if (p.splits > 1 && tid == 0) {
        part[slot + HD4] = vec4(m_all, l_all, 0.0, 0.0);
    }
}
