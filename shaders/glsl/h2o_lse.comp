#version 450
// H2O over a run of tokens that attended densely (a prompt, or several tokens of one
// sequence): the softmax statistics of every query head, which h2o_mass.comp then turns into
// each position's share. Token t0 + i of the run (row steps[t0].x, entry steps[t0].y + i)
// attended to entries 0 ..= its own. Workgroup (i, g): for each query head h of KV head g,
// stats[t][h] = (max score, sum of exp(score - max)), scores scaled by p.scale.
// On CPU devices (Q_REGS) the token's queries are copied from shared memory into registers
// before the walk over positions: a CPU device loads shared memory inside a loop lane by
// lane, so every position would otherwise load all GROUP x HEAD_DIM query values per lane.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "reduce.glsl"
#define KV_BINDING 1
#define KV_READ_ONLY
#define KV_KEYS_ONLY
#include "kv_cache.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint GROUP = 1;                  // query heads per KV head
layout(constant_id = 3) const bool Q_REGS = false;             // queries in registers (CPU)
const uint HD4 = HEAD_DIM / 4;
#include "h2o.glsl"

layout(binding = 0) readonly buffer Q { vec4 q[]; };           // [tokens, q_stride], post-RoPE
layout(binding = 4) readonly buffer Steps { uvec4 steps[]; };  // StepToken: row, index, ..
layout(binding = 5) writeonly buffer Stats { vec2 stats[]; };  // [tokens, n_head]

shared vec4 qs[GROUP * HD4];

void main() {
    uint i = gl_WorkGroupID.x;
    uint g = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    uint t = p.t0 + i;
    uint row = steps[t].x;
    uint index = steps[t].y;
    uint qrow = t * p.q_stride / 4;
    for (uint d = tid; d < GROUP * HD4; d += WG) {
        qs[d] = q[qrow + g * GROUP * HD4 + d];
    }
    barrier();
    // Outside any loop, so a CPU device loads each value once for all lanes.
    vec4 qr[GROUP * HD4];
    if (Q_REGS) {
        [[unroll]] for (uint d = 0; d < GROUP * HD4; ++d) {
            qr[d] = qs[d];
        }
    }

    float m[GROUP];
    float l[GROUP];
    float s[GROUP];
    [[unroll]] for (uint h = 0; h < GROUP; ++h) {
        m[h] = -1e30;
        l[h] = 0.0;
    }
    for (uint j = tid; j <= index; j += WG) {
        uint kb = kv_index4(kv_slot(row, j, p.max_blocks), g, p.n_head_kv, HEAD_DIM);
#define KEY_AT(d) k_cache[kb + d]
        if (Q_REGS) {
            GROUP_SCORES(s, qr, 0, KEY_AT)
        } else {
            GROUP_SCORES(s, qs, 0, KEY_AT)
        }
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
