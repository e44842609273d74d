#version 450
// Copies the selected positions' K and V of each token of a step from the paged pool (host
// memory under InfiniGen) into the device scratch: for token tk of row `row`,
//   k_scratch[tk][g][j] = K(row, sel_idx[tk][g][j], g)   for j < sel_count[tk][g],
// and likewise V, and counts each fetch in the row's fetch counters (what pool eviction keeps;
// each sequence has its own row). Workgroup (x, g, tk): the x groups stride over KV head g's
// selection in vec4s, so the host can size the dispatch without knowing the count.
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

void main() {
    uint g = gl_WorkGroupID.y;
    uint tk = gl_WorkGroupID.z;
    uint row = steps[tk].row;
    uint list = tk * p.n_head_kv + g;
    uint hd4 = p.head_dim / 4;
    uint n = min(sel_count[list], p.cap) * hd4;
    for (uint e = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x; e < n;
         e += gl_NumWorkGroups.x * WG) {
        uint j = e / hd4;
        uint d = e % hd4;
        uint t = sel_idx[list * p.cap + j];
        if (d == 0) {
            atomicAdd(fetches[row * p.n_ctx + t], 1u);
        }
        uint src = kv_index4(kv_slot(row, t, p.max_blocks), g, p.n_head_kv, p.head_dim) + d;
        uint dst = (list * p.cap + j) * hd4 + d;
        k_scratch[dst] = k_cache[src];
        v_scratch[dst] = v_cache[src];
    }
}
