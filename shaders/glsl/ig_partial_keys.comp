#version 450
// InfiniGen's partial key cache: for positions p0 .. p1 of one row and every KV head g,
// pkeys[row][p][g][c] = sum_i K(row, p, g, i) * skew[g][i][c], the key projected on the first
// r columns of the layer's skew, where most of each query-key dot product lives.
// One invocation per (position, KV head, column); consecutive invocations write consecutive
// floats of pkeys.
#include "common.glsl"
#define KV_BINDING 0
#define KV_READ_ONLY
#include "kv_cache.glsl"
#include "ig_push.glsl"

layout(binding = 3) readonly buffer Skew { float skew[]; };   // [n_kv, head_dim, r]
layout(binding = 4) writeonly buffer PKeys { float pkeys[]; }; // [rows, n_ctx, n_kv, r]

void main() {
    uint idx = linear_index();
    if (idx >= (p.p1 - p.p0) * p.n_head_kv * p.r) {
        return;
    }
    uint c = idx % p.r;
    uint g = (idx / p.r) % p.n_head_kv;
    uint pos = p.p0 + idx / (p.r * p.n_head_kv);
    uint kb = kv_index4(kv_slot(p.row, pos, p.max_blocks), g, p.n_head_kv, p.head_dim);
    uint sb = g * p.head_dim * p.r + c;
    float sum = 0.0;
    for (uint d = 0; d < p.head_dim / 4; ++d) {
        vec4 k = k_cache[kb + d];
        uint s = sb + 4 * d * p.r;
        sum += k.x * skew[s] + k.y * skew[s + p.r] + k.z * skew[s + 2 * p.r]
            + k.w * skew[s + 3 * p.r];
    }
    pkeys[((p.row * p.n_ctx + pos) * p.n_head_kv + g) * p.r + c] = sum;
}
