#version 450
// InfiniGen's speculated attention scores for the current token of each row of a step: its
// query (before RoPE) is rotated at its position as rope_kv.comp does, projected on the first
// r columns of its KV head's skew, and dotted with the row's partial key cache:
//   scores[tk][h][t] = cap(scale * sum_c qp[h][c] * pkeys[row][t][h / group][c]),  t < index,
// capped as dense attention caps the model's scores (cap_score.glsl).
// Workgroup (x, y, tk) covers positions [x * SPAN * WG, (x + 1) * SPAN * WG) of the QH query
// heads y * QH .. (y + 1) * QH of token tk, all of one KV head (the grid spans the longest
// history; shorter ones leave their last groups idle). Each workgroup rebuilds qp for its
// heads in shared memory (QH * head_dim * r multiply-adds, far less than the SPAN * WG * r *
// QH it then spends on scores). CPU devices take a KV head's whole group (QH > 1), so that each
// partial key is loaded once for all the heads that read it. r is a multiple of 4 (the host
// zero-fills the skew's columns to one) and a specialization constant, so a partial key is
// r / 4 vec4 loads and the projected queries stay in registers.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "ig_push.glsl"
#define IG_STEPS_BINDING 5
#include "ig_step.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint SPAN = 4;                   // positions per invocation
layout(constant_id = 3) const uint QH = 1;                     // query heads per workgroup
layout(constant_id = 4) const uint R4 = 4;                     // partial columns r / 4
const uint R = 4 * R4;                                         // partial columns (p.r)
layout(binding = 0) readonly buffer Q { float q_raw[]; };      // [tokens, q_stride], heads first
layout(binding = 1) readonly buffer Table { vec2 cs[]; };      // [positions, rot_dim/2] (cos, sin)
layout(binding = 2) readonly buffer Skew { float skew[]; };    // [n_kv, head_dim, r]
layout(binding = 3) readonly buffer PKeys { vec4 pkeys[]; };   // [rows, n_ctx, n_kv, r]
layout(binding = 4) writeonly buffer Scores { float scores[]; }; // [tokens, n_head, n_ctx]

shared float qf[QH * HEAD_DIM];                                // [QH][head_dim]
shared vec4 qp[QH * R4];                                       // [QH][r]

void main() {
    uint h0 = gl_WorkGroupID.y * QH;
    uint tk = gl_WorkGroupID.z;
    IgStep at = steps[tk];
    uint first = gl_WorkGroupID.x * SPAN * WG;
    if (first >= at.index) {
        return;                                                // uniform: the whole group
    }
    uint g = h0 / (p.n_head / p.n_head_kv);
    uint tid = gl_LocalInvocationID.x;
    uint base = (p.token + tk) * p.q_stride + h0 * HEAD_DIM;
    for (uint d = tid; d < QH * HEAD_DIM; d += WG) {
        qf[d] = q_raw[base + d];
    }
    barrier();
    uint half_rot = p.rot_dim / 2;
    for (uint ji = tid; ji < QH * half_rot; ji += WG) {
        uint i = ji % half_rot;
        uint head = ji / half_rot * HEAD_DIM;
        uint a = head + (p.mode == 0 ? i : 2 * i);
        uint b = head + (p.mode == 0 ? i + half_rot : 2 * i + 1);
        vec2 rot = cs[at.pos * half_rot + i];
        float x0 = qf[a];
        float x1 = qf[b];
        qf[a] = x0 * rot.x - x1 * rot.y;
        qf[b] = x0 * rot.y + x1 * rot.x;
    }
    barrier();
    for (uint jc = tid; jc < QH * R; jc += WG) {
        uint head = jc / R * HEAD_DIM;
        uint c = jc % R;
        float sum = 0.0;
        for (uint i = 0; i < HEAD_DIM; ++i) {
            sum += qf[head + i] * skew[(g * HEAD_DIM + i) * R + c];
        }
        qp[jc / 4][jc % 4] = sum;
    }
    barrier();
    // The projected queries stay in registers while the workgroup scores its positions.
    vec4 qv[QH * R4];
    [[unroll]] for (uint i = 0; i < QH * R4; ++i) {
        qv[i] = qp[i];
    }
    uint out_base = (tk * p.n_head + h0) * p.n_ctx;
    for (uint k = 0; k < SPAN; ++k) {
        uint t = first + k * WG + tid;
        if (t < at.index) {
            uint kb = ((at.row * p.n_ctx + t) * p.n_head_kv + g) * R4;
            float sums[QH];
            [[unroll]] for (uint j = 0; j < QH; ++j) {
                sums[j] = 0.0;
            }
            [[unroll]] for (uint c = 0; c < R4; ++c) {
                vec4 key = pkeys[kb + c];
                [[unroll]] for (uint j = 0; j < QH; ++j) {
                    sums[j] += dot(qv[j * R4 + c], key);
                }
            }
            [[unroll]] for (uint j = 0; j < QH; ++j) {
                scores[out_base + j * p.n_ctx + t] = cap_score(p.scale * sums[j]);
            }
        }
    }
}
