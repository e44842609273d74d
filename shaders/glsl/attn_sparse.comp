#version 450
// Decode attention over InfiniGen's selection: the current token of each row of a step attends
// to the history positions gathered into its k_scratch / v_scratch (sel_count[tk][g] of them,
// in stored order) and then to its own entry `index`, read from the paged pool where rope_kv
// stored it. Workgroup (x, tk, z) takes QH query heads of a KV head for token tk
// (ig_step.glsl). The online softmax and merge are attn_decode.comp's
// (include/attn_online.glsl), so with every position selected in ascending order both
// kernels do the same arithmetic. So is the split over workgroups along z when p.splits > 1
// (include/attn_split.glsl).
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "reduce.glsl"
#define KV_BINDING 2
#define KV_READ_ONLY
#include "kv_cache.glsl"
#include "ig_push.glsl"
#define IG_STEPS_BINDING 9
#include "ig_step.glsl"
#include "attn_split.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint SUBGROUPS = 64;             // most subgroups in a workgroup
layout(constant_id = 3) const uint QH = 1;                     // query heads per workgroup
const uint HD4 = HEAD_DIM / 4;
layout(binding = 0) readonly buffer Q { vec4 q[]; };           // [tokens, q_stride], post-RoPE
layout(binding = 1) writeonly buffer O { vec4 o[]; };          // [tokens, n_head * head_dim]
layout(binding = 5) readonly buffer KS { vec4 k_scratch[]; };  // [tokens, n_kv, cap, head_dim]
layout(binding = 6) readonly buffer VS { vec4 v_scratch[]; };  // [tokens, n_kv, cap, head_dim]
layout(binding = 7) readonly buffer Count { uint sel_count[]; }; // [tokens, n_kv]
layout(binding = 8) writeonly buffer Part { vec4 part[]; };    // splits > 1: the partials

#define ROLLED_KEYS_ID 4
#define CAP_SCORE(s) cap_score(s)
#include "attn_online.glsl"

void main() {
    uint h0 = gl_WorkGroupID.x * QH;
    uint kvh = h0 / (p.n_head / p.n_head_kv);
    uint tk = gl_WorkGroupID.y;
    IgStep at = steps[tk];
    uint tid = gl_LocalInvocationID.x;
    for (uint d = tid; d < QH * HD4; d += WG) {
        qs[d] = q[((p.token + tk) * p.q_stride + h0 * HEAD_DIM) / 4 + d] * p.scale;
    }
    barrier();

    uint list = tk * p.n_head_kv + kvh;
    uint count = min(sel_count[list], p.cap);
    uint own = kv_index4(kv_slot(at.row, at.index, p.max_blocks), kvh, p.n_head_kv, HEAD_DIM);
    online_begin();
    // Entries 0 .. count: the selection, then the token's own position.
    uint z = gl_WorkGroupID.z;
    uint len = p.splits > 1 ? split_len(count + 1, p.splits) : count + 1;
    uint end = min(count + 1, (z + 1) * len);
    for (uint j = z * len + tid; j < end; j += WG) {
        bool current = j == count;
        uint kb = current ? own : (list * p.cap + j) * HD4;
#define K_AT(d) (current ? K_LOAD(kb + d) : k_scratch[kb + d])
#define V_AT(d) (current ? V_LOAD(kb + d) : v_scratch[kb + d])
        ONLINE_ADD(K_AT, V_AT)
#undef K_AT
#undef V_AT
    }
    online_end(h0, p.token + tk, tk, z);
}
