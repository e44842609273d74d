#version 450
// InfiniGen's speculated attention scores for the current token of each row of a step: its
// query (before RoPE) is rotated at its position as rope_kv.comp does, projected on the first
// r columns of its KV head's skew, and dotted with the row's partial key cache:
//   scores[tk][h][t] = scale * sum_c qp[h][c] * pkeys[row][t][h / group][c],  t < index.
// Workgroup (x, h, tk) covers positions [x * SPAN * WG, (x + 1) * SPAN * WG) of head h of
// token tk (the grid spans the longest history; shorter ones leave their last groups idle);
// each workgroup rebuilds qp for its head in shared memory (head_dim * r multiply-adds, far
// less than the SPAN * WG * r it then spends on scores).
#include "common.glsl"
#include "ig_push.glsl"
#define IG_STEPS_BINDING 5
#include "ig_step.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint SPAN = 4;                   // positions per invocation
layout(binding = 0) readonly buffer Q { float q_raw[]; };      // [tokens, q_stride], heads first
layout(binding = 1) readonly buffer Table { vec2 cs[]; };      // [positions, rot_dim/2] (cos, sin)
layout(binding = 2) readonly buffer Skew { float skew[]; };    // [n_kv, head_dim, r]
layout(binding = 3) readonly buffer PKeys { float pkeys[]; };  // [rows, n_ctx, n_kv, r]
layout(binding = 4) writeonly buffer Scores { float scores[]; }; // [tokens, n_head, n_ctx]

shared float qf[HEAD_DIM];
shared float qp[HEAD_DIM];                                     // r <= head_dim

void main() {
    uint h = gl_WorkGroupID.y;
    uint tk = gl_WorkGroupID.z;
    IgStep at = steps[tk];
    uint first = gl_WorkGroupID.x * SPAN * WG;
    if (first >= at.index) {
        return;                                                // uniform: the whole group
    }
    uint g = h / (p.n_head / p.n_head_kv);
    uint tid = gl_LocalInvocationID.x;
    uint base = (p.token + tk) * p.q_stride + h * HEAD_DIM;
    for (uint d = tid; d < HEAD_DIM; d += WG) {
        qf[d] = q_raw[base + d];
    }
    barrier();
    uint half_rot = p.rot_dim / 2;
    for (uint i = tid; i < half_rot; i += WG) {
        uint a = p.mode == 0 ? i : 2 * i;
        uint b = p.mode == 0 ? i + half_rot : 2 * i + 1;
        vec2 rot = cs[at.pos * half_rot + i];
        float x0 = qf[a];
        float x1 = qf[b];
        qf[a] = x0 * rot.x - x1 * rot.y;
        qf[b] = x0 * rot.y + x1 * rot.x;
    }
    barrier();
    for (uint c = tid; c < p.r; c += WG) {
        float sum = 0.0;
        for (uint i = 0; i < HEAD_DIM; ++i) {
            sum += qf[i] * skew[(g * HEAD_DIM + i) * p.r + c];
        }
        qp[c] = sum;
    }
    barrier();
    uint out_base = (tk * p.n_head + h) * p.n_ctx;
    for (uint k = 0; k < SPAN; ++k) {
        uint t = first + k * WG + tid;
        if (t < at.index) {
            uint kb = ((at.row * p.n_ctx + t) * p.n_head_kv + g) * p.r;
            float sum = 0.0;
            for (uint c = 0; c < p.r; ++c) {
                sum += qp[c] * pkeys[kb + c];
            }
            scores[out_base + t] = p.scale * sum;
        }
    }
}
