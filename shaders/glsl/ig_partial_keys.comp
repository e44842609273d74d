#version 450
// InfiniGen's partial key cache: for each token of a step (the keys rope_kv stored, or a
// row's history when InfiniGen starts on a filled cache) and every KV head g,
//   pkeys[row][pos][g][c] = sum_i K(row, pos, g, i) * skew[g][i][c],
// the key projected on the first r columns of the layer's skew, where most of each query-key
// dot product lives. One invocation per (token, KV head, column); consecutive invocations
// write consecutive floats of pkeys.
#include "common.glsl"
#define KV_BINDING 0
#define KV_READ_ONLY
#include "kv_cache.glsl"
#include "ig_push.glsl"

layout(binding = 3) readonly buffer Skew { float skew[]; };   // [n_kv, head_dim, r]
layout(binding = 4) writeonly buffer PKeys { float pkeys[]; }; // [rows, n_ctx, n_kv, r]
// The step's tokens (`StepToken`): row, index in the row, beam table, RoPE position.
layout(binding = 5) readonly buffer Steps { uvec4 step_tokens[]; };

void main() {
    uint idx = linear_index();
    if (idx >= p.tokens * p.n_head_kv * p.r) {
        return;
    }
    uint c = idx % p.r;
    uint g = (idx / p.r) % p.n_head_kv;
    uvec4 st = step_tokens[idx / (p.r * p.n_head_kv)];
    uint row = st.x;
    uint pos = st.y;
    uint kb = kv_index4(kv_slot(row, pos, p.max_blocks), g, p.n_head_kv, p.head_dim);
    uint sb = g * p.head_dim * p.r + c;
    float sum = 0.0;
    for (uint d = 0; d < p.head_dim / 4; ++d) {
        vec4 k = K_LOAD(kb + d);
        uint s = sb + 4 * d * p.r;
        sum += k.x * skew[s] + k.y * skew[s + p.r] + k.z * skew[s + 2 * p.r]
            + k.w * skew[s + 3 * p.r];
    }
    pkeys[((row * p.n_ctx + pos) * p.n_head_kv + g) * p.r + c] = sum;
}
