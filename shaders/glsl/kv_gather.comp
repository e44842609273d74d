#version 450
// Copies the selected positions' K and V of each token of a step from the paged pool (host
// memory under InfiniGen) into the device scratch: for token tk of row `row`,
//   k_scratch[tk][g][j] = K(row, sel_idx[tk][g][j], g)   for j < sel_count[tk][g],
// and likewise V, and counts each fetch in the row's fetch counters (what pool eviction keeps;
// each sequence has its own row). Workgroup (x, g, tk): the x groups stride over KV head g's
// selection, so the host can size the dispatch without knowing the count. On a GPU each
// invocation copies one vec4, so neighbours read neighbouring memory; on a CPU device
// (PER_POSITION) each copies a whole position, so it looks the position up once, not once per
// vec4.
#include "common.glsl"
#define KV_BINDING 0
#define KV_READ_ONLY
#include "kv_cache.glsl"
#include "ig_push.glsl"
#define IG_STEPS_BINDING 8
#include "ig_step.glsl"

layout(binding = 3) readonly buffer Idx { uint sel_idx[]; };     // [tokens, n_kv, cap]
layout(binding = 4) readonly buffer Count { uint sel_count[]; }; // [tokens, n_kv]
layout(binding = 5) writeonly buffer KS { vec4 k_scratch[]; };   // [tokens, n_kv, cap, head_dim]
layout(binding = 6) writeonly buffer VS { vec4 v_scratch[]; };   // [tokens, n_kv, cap, head_dim]
layout(binding = 7) buffer Fetches { uint fetches[]; };          // [rows, n_ctx]

layout(constant_id = 1) const bool PER_POSITION = false;

void main() {
    uint g = gl_WorkGroupID.y;
    uint tk = gl_WorkGroupID.z;
    uint row = steps[tk].row;
    uint list = tk * p.n_head_kv + g;
    uint hd4 = p.head_dim / 4;
    uint count = min(sel_count[list], p.cap);
    uint first = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * WG;
    if (PER_POSITION) {
        for (uint j = first; j < count; j += stride) {
            uint t = sel_idx[list * p.cap + j];
            atomicAdd(fetches[row * p.n_ctx + t], 1u);
            uint src = kv_index4(kv_slot(row, t, p.max_blocks), g, p.n_head_kv, p.head_dim);
            uint dst = (list * p.cap + j) * hd4;
            for (uint d = 0; d < hd4; ++d) {
                k_scratch[dst + d] = K_LOAD(src + d);
                v_scratch[dst + d] = V_LOAD(src + d);
            }
        }
        return;
    }
    for (uint e = first; e < count * hd4; e += stride) {
        uint j = e / hd4;
        uint d = e % hd4;
        uint t = sel_idx[list * p.cap + j];
        if (d == 0) {
            atomicAdd(fetches[row * p.n_ctx + t], 1u);
        }
        uint src = kv_index4(kv_slot(row, t, p.max_blocks), g, p.n_head_kv, p.head_dim) + d;
        uint dst = (list * p.cap + j) * hd4 + d;
        k_scratch[dst] = K_LOAD(src);
        v_scratch[dst] = V_LOAD(src);
    }
}
