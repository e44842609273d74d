#version 450
// H2O over a run of tokens that attended densely (a prompt, or several tokens of one
// sequence): the softmax statistics of every query head, which h2o_mass.comp then turns into
// each position's share. Token t0 + i of the run (row steps[t0].x, entry steps[t0].y + i)
// attended to entries 0 ..= its own. For each query head h of KV head g,
// stats[t][h] = (max score, sum of exp(score - max)), scores scaled by p.scale.
//
// GPUs: workgroup (i, g) takes token i, its invocations striding over the positions, and
// merges their statistics. CPU devices (Q_REGS; one subgroup of at most 16 lanes per
// workgroup): workgroup (x, g) takes WG tokens, one per lane, each with its queries in
// registers, and walks the positions in tiles of WG: lane j loads the key at position j of
// the tile and every lane takes it with subgroupBroadcast, as attn_prefill.comp does. A CPU
// device loads lane by lane, so each key is then loaded once per tile rather than once per
// token that sees it.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#include "common.glsl"
#include "reduce.glsl"
#define KV_BINDING 1
#define KV_READ_ONLY
#define KV_KEYS_ONLY
#include "kv_cache.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint GROUP = 1;                  // query heads per KV head
layout(constant_id = 3) const bool Q_REGS = false;             // the CPU-device shape
const uint HD4 = HEAD_DIM / 4;
#include "h2o.glsl"

layout(binding = 0) readonly buffer Q { vec4 q[]; };           // [tokens, q_stride], post-RoPE
layout(binding = 4) readonly buffer Steps { uvec4 steps[]; };  // StepToken: row, index, ..
layout(binding = 5) writeonly buffer Stats { vec2 stats[]; };  // [tokens, n_head]

shared vec4 qs[GROUP * HD4];

// GPUs: token gl_WorkGroupID.x, positions strided over the workgroup.
void stats_strided(uint g, uint tid) {
    uint t = p.t0 + gl_WorkGroupID.x;
    uint row = steps[t].x;
    uint index = steps[t].y;
    uint qrow = t * p.q_stride / 4;
    for (uint d = tid; d < GROUP * HD4; d += WG) {
        qs[d] = q[qrow + g * GROUP * HD4 + d];
    }
    barrier();

    float m[GROUP];
    float l[GROUP];
    float s[GROUP];
    [[unroll]] for (uint h = 0; h < GROUP; ++h) {
        m[h] = -1e30;
        l[h] = 0.0;
    }
    for (uint j = tid; j <= index; j += WG) {
        uint kb = kv_index4(kv_slot(row, j, p.max_blocks), g, p.n_head_kv, HEAD_DIM);
#define KEY_AT(d) K_LOAD(kb + d)
        GROUP_SCORES(s, qs, 0, KEY_AT)
#undef KEY_AT
        ONLINE_MAX_SUM(s, m, l)
    }
    MERGE_MAX_SUM(m, l)
    if (tid == 0) {
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {
            stats[t * p.n_head + g * GROUP + h] = vec2(m[h], l[h]);
        }
    }
}

// CPU devices: one token per lane, keys handed round.
void stats_broadcast(uint g, uint tid) {
    uint first = gl_WorkGroupID.x * WG;
    // Lanes past the run compute a copy of its last token and write nothing.
    uint i = min(first + tid, p.tokens - 1);
    uint t = p.t0 + i;
    uint row = steps[p.t0].x;
    uint index = steps[p.t0].y + i;
    // The last position any lane of the workgroup sees.
    uint last = steps[p.t0].y + min(first + WG, p.tokens) - 1;
    vec4 qr[GROUP * HD4];
    uint qrow = t * p.q_stride / 4 + g * GROUP * HD4;
    [[unroll]] for (uint d = 0; d < GROUP * HD4; ++d) {
        qr[d] = q[qrow + d];
    }

    float m[GROUP];
    float l[GROUP];
    float s[GROUP];
    [[unroll]] for (uint h = 0; h < GROUP; ++h) {
        m[h] = -1e30;
        l[h] = 0.0;
    }
    vec4 kl[HD4];
    vec4 kd[HD4];
    for (uint j0 = 0; j0 <= last; j0 += WG) {
        uint kb = kv_index4(kv_slot(row, min(j0 + tid, last), p.max_blocks), g, p.n_head_kv,
                            HEAD_DIM);
        [[unroll]] for (uint d = 0; d < HD4; ++d) {
            kl[d] = K_LOAD(kb + d);
        }
        // Every lane takes part in each broadcast; only the positions its token saw count.
#define KEY_AT(d) kd[d]
#define SEE(L)                                                                  \
        if (L < WG) {                                                           \
            [[unroll]] for (uint d = 0; d < HD4; ++d) {                         \
                kd[d] = subgroupBroadcast(kl[d], L);                            \
            }                                                                   \
            GROUP_SCORES(s, qr, 0, KEY_AT)                                      \
            if (j0 + L <= index) {                                              \
                ONLINE_MAX_SUM(s, m, l)                                         \
            }                                                                   \
        }
        EACH_LANE(SEE)
#undef SEE
#undef KEY_AT
    }
    if (first + tid < p.tokens) {
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {
            stats[t * p.n_head + g * GROUP + h] = vec2(m[h], l[h]);
        }
    }
}

void main() {
    uint g = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    if (Q_REGS) {
        stats_broadcast(g, tid);
    } else {
        stats_strided(g, tid);
    }
}
