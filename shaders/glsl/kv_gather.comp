#version 450
// Copies the selected positions' K and V of one row from the paged pool (host memory under
// InfiniGen) into the device scratch: k_scratch[g][j] = K(row, sel_idx[g][j], g) for
// j < sel_count[g], and likewise V, and counts each fetch in the row's `fetches` (what pool
// eviction keeps; one buffer per row, so the gathers of a step's sequences are independent). Workgroup row y is KV head y; the x groups stride over its selection's vec4s, so the
// host can size the dispatch without knowing the count.
#include "common.glsl"
#define KV_BINDING 0
#define KV_READ_ONLY
#include "kv_cache.glsl"
#include "ig_push.glsl"

layout(binding = 3) readonly buffer Idx { uint sel_idx[]; };     // [n_kv, cap]
layout(binding = 4) readonly buffer Count { uint sel_count[]; }; // [n_kv]
layout(binding = 5) writeonly buffer KS { vec4 k_scratch[]; };   // [n_kv, cap, head_dim]
layout(binding = 6) writeonly buffer VS { vec4 v_scratch[]; };   // [n_kv, cap, head_dim]
layout(binding = 7) buffer Fetches { uint fetches[]; };          // [n_ctx], this row's

void main() {
    uint g = gl_WorkGroupID.y;
    uint hd4 = p.head_dim / 4;
    uint n = min(sel_count[g], p.cap) * hd4;
    for (uint e = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x; e < n;
         e += gl_NumWorkGroups.x * WG) {
        uint j = e / hd4;
        uint d = e % hd4;
        uint t = sel_idx[g * p.cap + j];
        if (d == 0) {
            atomicAdd(fetches[t], 1u);
        }
        uint src = kv_index4(kv_slot(p.row, t, p.max_blocks), g, p.n_head_kv, p.head_dim) + d;
        uint dst = (g * p.cap + j) * hd4 + d;
        k_scratch[dst] = k_cache[src];
        v_scratch[dst] = v_cache[src];
    }
}
