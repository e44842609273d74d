#version 450
// H2O after a decode step's sparse attention. Workgroup (g, tk) takes KV head g for token tk
// of the step, the current token of its row (ig_step.glsl): the token attended to the
// positions the row keeps, gathered into k_scratch in kept order, and to its own entry. Each
// of them gains the probabilities the group's query heads gave it, added head by head in
// order as the CPU reference adds them. Then the new entry joins the kept positions and, while
// they outnumber the token's budget, the one with the least mass among those older than the
// recent half of the budget leaves (the earlier of equals), the last kept slot filling its
// place. Evicting the lightest one at a time leaves the same set as the reference's sort.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "reduce.glsl"
#define IG_STEPS_BINDING 5
#include "ig_step.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint GROUP = 1;                  // query heads per KV head
const uint HD4 = HEAD_DIM / 4;
#include "h2o.glsl"

layout(binding = 0) readonly buffer Q { vec4 q[]; };           // [tokens, q_stride], post-RoPE
layout(binding = 1) readonly buffer KS { vec4 k_scratch[]; };  // [tokens, n_kv, cap, head_dim]
layout(binding = 2) buffer Kept { uint kept[]; };              // [rows, n_kv, cap]
layout(binding = 3) buffer KeptCount { uint kept_count[]; };   // [rows, n_kv]
layout(binding = 4) buffer Mass { float mass[]; };             // [rows, n_kv, n_ctx]

shared vec4 qs[GROUP * HD4];
// Each invocation's lightest candidate: mass, position, kept slot.
shared float cand_mass[WG];
shared uint cand_pos[WG];
shared uint cand_slot[WG];
shared uint chosen;

const uint NONE = 0xFFFFFFFFu;

void main() {
    uint g = gl_WorkGroupID.x;
    uint tk = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    IgStep at = steps[tk];
    uint qrow = (p.t0 + tk) * p.q_stride / 4;
    for (uint d = tid; d < GROUP * HD4; d += WG) {
        qs[d] = q[qrow + g * GROUP * HD4 + d];
    }
    barrier();

    uint list = at.row * p.n_head_kv + g;
    uint slots = list * p.cap;
    uint masses = list * p.n_ctx;
    uint count = kept_count[list];
    uint gathered = (tk * p.n_head_kv + g) * p.cap;
    // Entries 0 .. count: the kept positions as gathered, then the token's own key, which
    // rope_kv left rotated in q beside the queries.
    uint own = qrow + (p.n_head + g) * HD4;
#define KEY_AT(d) (j == count ? q[own + d] : k_scratch[(gathered + j) * HD4 + d])

    float m[GROUP];
    float l[GROUP];
    float s[GROUP];
    [[unroll]] for (uint h = 0; h < GROUP; ++h) {
        m[h] = -1e30;
        l[h] = 0.0;
    }
    for (uint j = tid; j <= count; j += WG) {
        GROUP_SCORES(s, qs, 0, KEY_AT)
        ONLINE_MAX_SUM(s, m, l)
    }
    MERGE_MAX_SUM(m, l)
    for (uint j = tid; j <= count; j += WG) {
        GROUP_SCORES(s, qs, 0, KEY_AT)
        uint pos = j == count ? at.index : kept[slots + j];
        float acc = mass[masses + pos];
        [[unroll]] for (uint h = 0; h < GROUP; ++h) {
            acc += exp(s[h] - m[h]) / l[h];
        }
        mass[masses + pos] = acc;
    }
#undef KEY_AT

    if (tid == 0) {
        kept[slots + count] = at.index;
    }
    uint n = count + 1;
    uint recent_start = at.index + 1 - at.budget / 2;
    while (n > at.budget) {
        memoryBarrierBuffer();
        barrier();
        float best = 1e38;
        uint best_pos = NONE;
        uint best_slot = NONE;
        for (uint j = tid; j < n; j += WG) {
            uint pos = kept[slots + j];
            float w = mass[masses + pos];
            if (pos < recent_start && (w < best || (w == best && pos < best_pos))) {
                best = w;
                best_pos = pos;
                best_slot = j;
            }
        }
        cand_mass[tid] = best;
        cand_pos[tid] = best_pos;
        cand_slot[tid] = best_slot;
        barrier();
        if (tid == 0) {
            uint c = 0;
            for (uint i = 1; i < WG; ++i) {
                bool lighter = cand_mass[i] < cand_mass[c]
                    || (cand_mass[i] == cand_mass[c] && cand_pos[i] < cand_pos[c]);
                if (lighter) {
                    c = i;
                }
            }
            chosen = cand_slot[c];
            if (chosen != NONE) {
                kept[slots + chosen] = kept[slots + n - 1];
            }
        }
        memoryBarrierShared();
        barrier();
        if (chosen == NONE) {
            break; // nothing old enough: cannot happen while the budget is at least 2
        }
        n -= 1;
    }
    if (tid == 0) {
        kept_count[list] = n;
    }
}
