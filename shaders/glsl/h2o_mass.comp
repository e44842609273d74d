#version 450
// H2O over a run of tokens that attended densely: adds to each position's mass the
// probabilities the run's query heads gave it, token by token and head by head in order, as
// the CPU reference adds them (h2o_lse.comp computed each head's max and sum). Token t0 + i
// of the run (row steps[t0].x, entry steps[t0].y + i) attended to entries 0 ..= its own.
// Workgroup (x, g) takes WG consecutive positions of KV head g, one per invocation, and walks
// the run's queries in tiles of TILE tokens staged in shared memory.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#define KV_BINDING 1
#define KV_READ_ONLY
#define KV_KEYS_ONLY
#include "kv_cache.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint GROUP = 1;                  // query heads per KV head
const uint HD4 = HEAD_DIM / 4;
#include "h2o.glsl"

layout(binding = 0) readonly buffer Q { vec4 q[]; };           // [tokens, q_stride], post-RoPE
layout(binding = 4) readonly buffer Steps { uvec4 steps[]; };  // StepToken: row, index, ..
layout(binding = 5) readonly buffer Stats { vec2 stats[]; };   // [tokens, n_head]
layout(binding = 6) buffer Mass { float mass[]; };             // [rows, n_kv, n_ctx]

const uint TILE = 8;
shared vec4 qs_tile[TILE * GROUP * HD4];
shared vec2 stats_tile[TILE * GROUP];

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
        key[d] = k_cache[kb + d];
    }
    uint at = (row * p.n_head_kv + g) * p.n_ctx + j;
    float acc = live ? mass[at] : 0.0;
    // Tokens before entry j did not see it. The tiles start from the workgroup's first
    // position, so every invocation meets the same barriers.
    uint from = j > first ? j - first : 0;
    uint j0 = gl_WorkGroupID.x * WG;
    uint from0 = j0 > first ? j0 - first : 0;
    for (uint t0 = from0 - from0 % TILE; t0 < p.tokens; t0 += TILE) {
        barrier();
        uint n = min(TILE, p.tokens - t0);
        for (uint e = tid; e < n * GROUP * HD4; e += WG) {
            uint i = e / (GROUP * HD4);
            uint r = e % (GROUP * HD4);
            qs_tile[e] = q[(p.t0 + t0 + i) * p.q_stride / 4 + g * GROUP * HD4 + r];
        }
        for (uint e = tid; e < n * GROUP; e += WG) {
            stats_tile[e] = stats[(p.t0 + t0 + e / GROUP) * p.n_head + g * GROUP + e % GROUP];
        }
        barrier();
        for (uint i = 0; i < n; ++i) {
            if (t0 + i < from) {
                continue;
            }
            float s[GROUP];
#define KEY_AT(d) key[d]
            GROUP_SCORES(s, qs_tile, i * GROUP * HD4, KEY_AT)
#undef KEY_AT
            [[unroll]] for (uint h = 0; h < GROUP; ++h) {
                vec2 st = stats_tile[i * GROUP + h];
                acc += exp(s[h] - st.x) / st.y;
            }
        }
    }
    if (live) {
        mass[at] = acc;
    }
}
