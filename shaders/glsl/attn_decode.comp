#version 450
// Attention for decode: each new token against every cached position of its own sequence,
// read through the paged cache's block table (and beam table, for beam search).
// One workgroup per (QH query heads, token); grouped-query attention maps query head h to KV
// head h / (n_head / n_head_kv), which each of its group's workgroups reads in place.
// Each invocation runs an online softmax over positions tid, tid + WG, ...; the partial
// (max, sum, weighted V) triples are then merged across the workgroup. A token at position
// pos attends to positions [0, pos] (a local layer's to its window's), so this kernel also
// serves short multi-token steps and a batch of sequences (one token or a few each).
// With p.splits > 1 each (query head, token) has p.splits workgroups along z, each over one
// run of positions, and partials go to attn_merge.comp (attn_split.glsl). A model's sinks
// (p.sinks) join the softmax where it ends: here unsplit, in the merge when split.
//
// FUSED (every sequence in the dispatch has one new token): the kernel also does rope_kv's
// work for its token, saving a dispatch per layer: it rotates its query head and the new
// key, stores the new key and value in the cache (the first head of each group does), and
// uses them from shared memory, rounded as the cache stores them, for the token's own
// position, which other workgroups may still be writing.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "reduce.glsl"
#define KV_BINDING 2
#define BY_ADDRESS_ID 5
#define KV_BEAMS
#include "kv_cache.glsl"
#define STEPS_BINDING 6
#include "attn_push.glsl"
#include "attn_split.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint SUBGROUPS = 64;            // most subgroups in a workgroup
layout(constant_id = 3) const bool FUSED = false;
// Query heads per workgroup, all of one KV head's group: each key and value row is loaded
// once for all of them. CPU devices take the whole group (they load a row lane by lane, at
// a cost per lane); GPUs take 1, for more workgroups.
layout(constant_id = 4) const uint QH = 1;
const uint HD4 = HEAD_DIM / 4;
layout(binding = 0) readonly buffer QKV { vec4 qkv[]; };      // [tokens, q_stride], queries first
layout(binding = 1) writeonly buffer O { vec4 o[]; };         // [tokens, n_head * head_dim]
layout(binding = 7) readonly buffer Table { vec2 cs[]; };     // FUSED: [pos, rot_dim/2] (cos, sin)
layout(binding = 8) writeonly buffer Part { vec4 part[]; };   // splits > 1: the partials

#define ROLLED_KEYS_ID 6
#define SINKS_BINDING 9                                       // [n_head], where p.sinks
#define CAP_SCORE(s) cap_score(s)
#include "attn_online.glsl"
shared float qf[QH * HEAD_DIM];
shared float kf[HEAD_DIM];
shared vec4 knew[HD4];
shared vec4 vnew[HD4];

float qkv_at(uint i) {
    return qkv[i >> 2][i & 3u];
}

// Rotates pair i of the head at ARR[OFF ..] (shared), as rope_kv.comp does.
#define ROTATE(ARR, OFF, i, pos)                                               \
    {                                                                          \
        uint half_rot = p.rot_dim / 2;                                         \
        uint a = OFF + (p.mode == 0 ? i : 2 * i);                              \
        uint b = OFF + (p.mode == 0 ? i + half_rot : 2 * i + 1);               \
        vec2 r = cs[pos * half_rot + i];                                       \
        float x0 = ARR[a];                                                     \
        float x1 = ARR[b];                                                     \
        ARR[a] = x0 * r.x - x1 * r.y;                                          \
        ARR[b] = x0 * r.y + x1 * r.x;                                          \
    }

void main() {
    uint h0 = gl_WorkGroupID.x * QH;                           // the first of its query heads
    uint t = p.t0 + gl_WorkGroupID.y;
    uvec4 st = steps[t];
    uint kvh = h0 / (p.n_head / p.n_head_kv);
    uint n_kv = st.y + 1;
    uint tid = gl_LocalInvocationID.x;
    uint pos = st.y;
    uint z = gl_WorkGroupID.z;
    uint first = window_start(pos);
    uint len = p.splits > 1 ? split_len(n_kv - first, p.splits) : n_kv - first;
    if (FUSED) {
        uint base = t * p.q_stride;
        uint kbase = base + (p.n_head + kvh) * HEAD_DIM;
        uint vbase = base + (p.n_head + p.n_head_kv + kvh) * HEAD_DIM;
        for (uint d = tid; d < QH * HEAD_DIM; d += WG) {
            qf[d] = qkv_at(base + h0 * HEAD_DIM + d);
        }
        for (uint d = tid; d < HEAD_DIM; d += WG) {
            kf[d] = qkv_at(kbase + d);
        }
        for (uint d = tid; d < HD4; d += WG) {
            vnew[d] = qkv[vbase / 4 + d];
        }
        barrier();
        for (uint i = tid; i < p.rot_dim / 2; i += WG) {
            for (uint qh = 0; qh < QH; ++qh) {
                ROTATE(qf, qh * HEAD_DIM, i, st.w)
            }
            ROTATE(kf, 0, i, st.w)
        }
        barrier();
        bool writer = z == 0 && h0 % (p.n_head / p.n_head_kv) == 0;
        uint kb = kv_index4(kv_slot(st.x, pos, p.max_blocks), kvh, p.n_head_kv, HEAD_DIM);
        // KV_GROUP values at a time (a q8 block has one scale); the token's own position is
        // then read as the cache holds it.
        const uint G4 = KV_GROUP / 4;
        for (uint g = tid; g < HEAD_DIM / KV_GROUP; g += WG) {
            float kg[KV_GROUP];
            float vg[KV_GROUP];
            for (uint e = 0; e < KV_GROUP; ++e) {
                kg[e] = kf[g * KV_GROUP + e];
                vg[e] = vnew[g * G4 + e / 4][e % 4];
            }
            if (writer) {
                kv_store_k(kb + g * G4, kg);
                kv_store_v(kb + g * G4, vg);
            }
            kv_round(kg);
            kv_round(vg);
            for (uint e = 0; e < G4; ++e) {
                knew[g * G4 + e] = vec4(kg[4 * e], kg[4 * e + 1], kg[4 * e + 2], kg[4 * e + 3]);
                vnew[g * G4 + e] = vec4(vg[4 * e], vg[4 * e + 1], vg[4 * e + 2], vg[4 * e + 3]);
            }
        }
        for (uint d = tid; d < QH * HD4; d += WG) {
            qs[d] = vec4(qf[4 * d], qf[4 * d + 1], qf[4 * d + 2], qf[4 * d + 3]) * p.scale;
        }
    } else {
        for (uint d = tid; d < QH * HD4; d += WG) {
            qs[d] = qkv[(t * p.q_stride + h0 * HEAD_DIM) / 4 + d] * p.scale;
        }
    }
    barrier();

    online_begin();
    // A run past the token's last position is empty and leaves the partial (-1e30, 0), which
    // weighs nothing in the merge.
    uint end = min(n_kv, first + (z + 1) * len);
    for (uint j = first + z * len + tid; j < end; j += WG) {
        // FUSED: the token's own position comes from shared memory, not the cache.
        bool fresh = FUSED && j == pos;
        uint slot = kv_slot(kv_row(st.x, st.z, j), j, p.max_blocks);
        uint kb = kv_index4(slot, kvh, p.n_head_kv, HEAD_DIM);
#define K_AT(d) (fresh ? knew[d] : K_LOAD(kb + d))
#define V_AT(d) (fresh ? vnew[d] : V_LOAD(kb + d))
        ONLINE_ADD(K_AT, V_AT)
#undef K_AT
#undef V_AT
    }

    online_end(h0, t, gl_WorkGroupID.y, z);
}
