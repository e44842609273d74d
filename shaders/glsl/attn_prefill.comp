#version 450
// Causal attention for prefill, flash-attention style: the score matrix is never stored.
// One dispatch covers a run of tokens t0 .. t0 + tokens of one sequence at consecutive
// positions (steps[t0] gives its row, first position and beam table). A workgroup takes WG
// consecutive queries of one head (one invocation per query) and walks the keys in tiles of
// BC positions, keeping a running max, sum and weighted V per query (online softmax). Query
// i sits at position pos0 + i and sees positions [0, pos0 + i]: earlier positions come from
// the cache (a chunked prompt, an earlier turn, a shared prefix). On a local layer it sees
// the window's last positions only, and the walk starts where the first query's window does.
//
// GPUs stage each K/V tile in shared memory (STAGE). CPU devices run one subgroup per
// workgroup, a tile as wide as the subgroup: lane j loads the key and value at position j of
// the tile, and every lane takes them from lane j with subgroupBroadcast, a register shuffle.
// A CPU device turns each load into one load per lane, so were every lane to read every key,
// each would be read once per lane. There a lane also takes HEADS query heads of its token
// that share a KV head, so each key and value loaded and broadcast serves all of them, and
// the `_wide` variant loads them through their addresses (K_LOAD in kv_cache.glsl).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#define KV_BINDING 2
#define BY_ADDRESS_ID 5
#define KV_READ_ONLY
#define KV_BEAMS
#include "kv_cache.glsl"
#define STEPS_BINDING 6
#include "attn_push.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint BC = 16;   // key positions per tile (the subgroup, !STAGE)
layout(constant_id = 3) const bool STAGE = true;              // K/V tiles in shared memory
layout(constant_id = 4) const uint HEADS = 1;  // query heads per invocation (one KV head's)
const uint HD4 = HEAD_DIM / 4;
layout(binding = 0) readonly buffer QKV { vec4 qkv[]; };      // [tokens, q_stride], queries first
layout(binding = 1) writeonly buffer O { vec4 o[]; };         // [tokens, n_head * head_dim]
layout(binding = 7) readonly buffer Sinks { float sink_logit[]; };  // [n_head], where p.sinks

shared vec4 ks[BC][HD4];
shared vec4 vs[BC][HD4];


void main() {
    uint h0 = gl_WorkGroupID.y * HEADS;
    uint kvh = h0 / (p.n_head / p.n_head_kv);
    uint tid = gl_LocalInvocationID.x;
    uint first = gl_WorkGroupID.x * WG;
    uvec4 seq = steps[p.t0];
    // Invocations past the run compute a copy of its last query and write nothing.
    uint i = min(first + tid, p.tokens - 1);
    bool live = first + tid < p.tokens;
    uint t = p.t0 + i;
    uint qpos = seq.y + i;
    // The last position any query of this workgroup sees.
    uint last = seq.y + min(first + WG, p.tokens) - 1;

    // Head g's slice d of q and of the weighted V sum at [g * HD4 + d].
    vec4 q[HEADS * HD4];
    vec4 acc[HEADS * HD4];
    float m[HEADS];
    float l[HEADS];
    [[unroll]] for (uint g = 0; g < HEADS; ++g) {
        [[unroll]] for (uint d = 0; d < HD4; ++d) {
            q[g * HD4 + d] = qkv[(t * p.q_stride + (h0 + g) * HEAD_DIM) / 4 + d] * p.scale;
            acc[g * HD4 + d] = vec4(0.0);
        }
        m[g] = -1e30;
        l[g] = 0.0;
    }

    for (uint k0 = window_start(seq.y + first); k0 <= last; k0 += BC) {
        // Head g's score of tile position j at [g * BC + j].
        float s[HEADS * BC];
        // This lane's key and value (broadcast path).
        vec4 kl[HD4];
        vec4 vl[HD4];
        if (STAGE) {
            // Where each position of the tile lives (positions past `last` repeat it, masked).
            uint kb[BC];
            for (uint j = 0; j < BC; ++j) {
                uint pos = min(k0 + j, last);
                uint slot = kv_slot(kv_row(seq.x, seq.z, pos), pos, p.max_blocks);
                kb[j] = kv_index4(slot, kvh, p.n_head_kv, HEAD_DIM);
            }
            for (uint e = tid; e < BC * HD4; e += WG) {
                uint j = e / HD4;
                uint d = e % HD4;
                ks[j][d] = K_LOAD(kb[j] + d);
                vs[j][d] = V_LOAD(kb[j] + d);
            }
            barrier();
            // Dimension-outer loops keep the tile's scores (and one slice of q) in registers.
            for (uint j = 0; j < HEADS * BC; ++j) {
                s[j] = 0.0;
            }
            for (uint d = 0; d < HD4; ++d) {
                for (uint j = 0; j < BC; ++j) {
                    vec4 kd = ks[j][d];
                    [[unroll]] for (uint g = 0; g < HEADS; ++g) {
                        s[g * BC + j] += dot(q[g * HD4 + d], kd);
                    }
                }
            }
        } else {
            uint pos = min(k0 + tid, last);
            uint kb = kv_index4(kv_slot(kv_row(seq.x, seq.z, pos), pos, p.max_blocks), kvh,
                                p.n_head_kv, HEAD_DIM);
            [[unroll]] for (uint d = 0; d < HD4; ++d) {
                kl[d] = K_LOAD(kb + d);
                vl[d] = V_LOAD(kb + d);
            }
#define SCORE(J)                                                           \
            if (J < BC) {                                                  \
                [[unroll]] for (uint g = 0; g < HEADS; ++g) {              \
                    s[g * BC + J] = 0.0;                                   \
                }                                                          \
                [[unroll]] for (uint d = 0; d < HD4; ++d) {                \
                    vec4 kd = subgroupBroadcast(kl[d], J);                 \
                    [[unroll]] for (uint g = 0; g < HEADS; ++g) {          \
                        s[g * BC + J] += dot(q[g * HD4 + d], kd);          \
                    }                                                      \
                }                                                          \
            }
            EACH_LANE(SCORE)
#undef SCORE
        }
        // Positions this query sees: up to its own and, on a local layer, within its window.
        // A tile may hold none of them; the running max then stays -1e30 and nothing adds.
        uint seen_from = window_start(qpos);
        float c[HEADS];
        [[unroll]] for (uint g = 0; g < HEADS; ++g) {
            float tile_max = -1e30;
            for (uint j = 0; j < BC; ++j) {
                bool seen = k0 + j <= qpos && k0 + j >= seen_from;
                s[g * BC + j] = seen ? cap_score(s[g * BC + j]) : -1e30;
                tile_max = max(tile_max, s[g * BC + j]);
            }
            float m_new = max(m[g], tile_max);
            c[g] = exp(m[g] - m_new);
            l[g] *= c[g];
            for (uint j = 0; j < BC; ++j) {
                bool seen = k0 + j <= qpos && k0 + j >= seen_from;
                s[g * BC + j] = seen ? exp(s[g * BC + j] - m_new) : 0.0;
                l[g] += s[g * BC + j];
            }
            m[g] = m_new;
        }
        if (STAGE) {
            for (uint d = 0; d < HD4; ++d) {
                [[unroll]] for (uint g = 0; g < HEADS; ++g) {
                    vec4 a = acc[g * HD4 + d] * c[g];
                    for (uint j = 0; j < BC; ++j) {
                        a += s[g * BC + j] * vs[j][d];
                    }
                    acc[g * HD4 + d] = a;
                }
            }
            barrier();
        } else {
            [[unroll]] for (uint d = 0; d < HD4; ++d) {
                [[unroll]] for (uint g = 0; g < HEADS; ++g) {
                    acc[g * HD4 + d] *= c[g];
                }
#define WEIGH(J)                                                           \
                if (J < BC) {                                              \
                    vec4 vd = subgroupBroadcast(vl[d], J);                 \
                    [[unroll]] for (uint g = 0; g < HEADS; ++g) {          \
                        acc[g * HD4 + d] += s[g * BC + J] * vd;            \
                    }                                                      \
                }
                EACH_LANE(WEIGH)
#undef WEIGH
            }
        }
    }
    if (live) {
        [[unroll]] for (uint g = 0; g < HEADS; ++g) {
            // A sink joins the denominator: both sides rescaled to the larger of it and the
            // running max.
            float scale = 1.0;
            float l_out = l[g];
            if (p.sinks != 0u) {
                float sink = sink_logit[h0 + g];
                float m_s = max(m[g], sink);
                scale = exp(m[g] - m_s);
                l_out = l[g] * scale + exp(sink - m_s);
            }
            for (uint d = 0; d < HD4; ++d) {
                o[(t * p.n_head * HEAD_DIM + (h0 + g) * HEAD_DIM) / 4 + d] =
                    acc[g * HD4 + d] * scale / l_out;
            }
        }
    }
}
