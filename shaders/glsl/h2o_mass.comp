#version 450
// H2O over a run of tokens that attended densely: adds to each position's mass the
// probabilities the run's query heads gave it, token by token and head by head in order, as
// the CPU reference adds them (h2o_lse.comp computed each head's max and sum). Token t0 + i
// of the run (row steps[t0].x, entry steps[t0].y + i) attended to entries 0 ..= its own.
// Workgroup (x, g) takes WG consecutive positions of KV head g, one per invocation, and walks
// the run's queries: GPUs in tiles of TILE tokens staged in shared memory; CPU devices
// (Q_REGS, one subgroup of at most 16 lanes per workgroup) a token at a time, each lane
// loading a WG-th of its queries and handing them round with subgroupBroadcast, as a CPU
// device loads lane by lane and every lane would otherwise load all of them.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#include "common.glsl"
#define KV_BINDING 1
#define KV_READ_ONLY
#define KV_KEYS_ONLY
#include "kv_cache.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint GROUP = 1;                  // query heads per KV head
layout(constant_id = 3) const bool Q_REGS = false;             // queries broadcast (CPU)
const uint HD4 = HEAD_DIM / 4;
#include "h2o.glsl"

layout(binding = 0) readonly buffer Q { vec4 q[]; };           // [tokens, q_stride], post-RoPE
layout(binding = 4) readonly buffer Steps { uvec4 steps[]; };  // StepToken: row, index, ..
layout(binding = 5) readonly buffer Stats { vec2 stats[]; };   // [tokens, n_head]
layout(binding = 6) buffer Mass { float mass[]; };             // [rows, n_kv, n_ctx]

const uint TILE = 8;
shared vec4 qs_tile[TILE * GROUP * HD4];
shared vec2 stats_tile[TILE * GROUP];

const uint QV = GROUP * HD4;                // query vec4s per token
const uint QPL = (QV + WG - 1) / WG;        // of them loaded per lane (Q_REGS)

// Adds the probabilities token i of the run gave this invocation's position to acc.
#define ADD_TOKEN(qv, base, st_at)                                              \
    {                                                                           \
        float s[GROUP];                                                         \
        GROUP_SCORES(s, qv, base, KEY_AT)                                       \
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {                           \
            vec2 st = st_at(h);                                                 \
            acc += exp(s[h] - st.x) / st.y;                                     \
        }                                                                       \
    }

void main() {
    uint g = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    uint row = steps[p.t0].x;
    uint first = steps[p.t0].y;
    uint last = first + p.tokens - 1;
    uint j = gl_WorkGroupID.x * WG + tid;
    bool live = j <= last;
    // Invocations past the run's last entry load entry 0 and store nothing.
    uint kb = kv_index4(kv_slot(row, live ? j : 0, p.max_blocks), g, p.n_head_kv, HEAD_DIM);
    vec4 key[HD4];
    [[unroll]] for (uint d = 0; d < HD4; ++d) {
        key[d] = K_LOAD(kb + d);
    }
    uint at = (row * p.n_head_kv + g) * p.n_ctx + j;
    float acc = live ? mass[at] : 0.0;
    // Tokens before entry j did not see it. Both walks start from the workgroup's first
    // position, so every invocation meets the same barriers and broadcasts.
    uint from = j > first ? j - first : 0;
    uint j0 = gl_WorkGroupID.x * WG;
    uint from0 = j0 > first ? j0 - first : 0;
#define KEY_AT(d) key[d]
    if (Q_REGS) {
        for (uint i = from0; i < p.tokens; ++i) {
            uint qbase = (p.t0 + i) * p.q_stride / 4 + g * QV;
            vec4 mine[QPL];
            [[unroll]] for (uint c = 0; c < QPL; ++c) {
                mine[c] = q[qbase + min(c * WG + tid, QV - 1)];
            }
            vec4 qr[QPL * WG];
            [[unroll]] for (uint c = 0; c < QPL; ++c) {
#define TAKE(L)                                                                 \
                if (L < WG) {                                                   \
                    qr[c * WG + L] = subgroupBroadcast(mine[c], L);             \
                }
                EACH_LANE(TAKE)
#undef TAKE
            }
            if (i >= from) {
#define STATS_AT(h) stats[(p.t0 + i) * p.n_head + g * GROUP + h]
                ADD_TOKEN(qr, 0, STATS_AT)
#undef STATS_AT
            }
        }
    } else {
        for (uint t0 = from0 - from0 % TILE; t0 < p.tokens; t0 += TILE) {
            barrier();
            uint n = min(TILE, p.tokens - t0);
            for (uint e = tid; e < n * QV; e += WG) {
                uint i = e / QV;
                qs_tile[e] = q[(p.t0 + t0 + i) * p.q_stride / 4 + g * QV + e % QV];
            }
            for (uint e = tid; e < n * GROUP; e += WG) {
                stats_tile[e] = stats[(p.t0 + t0 + e / GROUP) * p.n_head + g * GROUP + e % GROUP];
            }
            barrier();
            for (uint i = 0; i < n; ++i) {
                if (t0 + i < from) {
                    continue;
                }
#define STATS_AT(h) stats_tile[i * GROUP + h]
                ADD_TOKEN(qs_tile, i * QV, STATS_AT)
#undef STATS_AT
            }
        }
    }
#undef KEY_AT
    if (live) {
        mass[at] = acc;
    }
}
