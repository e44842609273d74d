#version 450
// Causal attention for prefill, flash-attention style: the score matrix is never stored.
// A workgroup takes WG consecutive queries of one head (one invocation per query) and walks
// the keys in tiles of BC positions staged in shared memory, keeping a running max, sum and
// weighted V per query (online softmax). Query t sits at position pos0 + t and sees positions
// [0, pos0 + t]; earlier positions come from the cache (a chunked prompt or an earlier turn).
#include "common.glsl"
#define KV_BINDING 2
#include "kv_cache.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint BC = 16;                   // key positions per tile
layout(binding = 0) readonly buffer QKV { float qkv[]; };     // [tokens, q_stride], queries first
layout(binding = 1) writeonly buffer O { float o[]; };        // [tokens, n_head * head_dim]
layout(push_constant) uniform Push {
    uint tokens;
    uint n_head;
    uint n_head_kv;
    uint pos0;
    uint q_stride;
    float scale;
} p;

shared float ks[BC][HEAD_DIM];
shared float vs[BC][HEAD_DIM];

void main() {
    uint h = gl_WorkGroupID.y;
    uint kvh = h / (p.n_head / p.n_head_kv);
    uint tid = gl_LocalInvocationID.x;
    uint first = gl_WorkGroupID.x * WG;
    uint t = first + tid;
    bool live = t < p.tokens;
    uint qpos = p.pos0 + t;
    // The last position any query of this workgroup sees.
    uint last = p.pos0 + min(first + WG, p.tokens) - 1;

    float q[HEAD_DIM];
    float acc[HEAD_DIM];
    for (uint d = 0; d < HEAD_DIM; ++d) {
        q[d] = live ? qkv[t * p.q_stride + h * HEAD_DIM + d] * p.scale : 0.0;
        acc[d] = 0.0;
    }
    float m = -1e30;
    float l = 0.0;

    for (uint k0 = 0; k0 <= last; k0 += BC) {
        for (uint e = tid; e < BC * HEAD_DIM; e += WG) {
            uint j = e / HEAD_DIM;
            uint d = e % HEAD_DIM;
            uint pos = k0 + j;
            uint c = kv_index(pos, kvh, p.n_head_kv, HEAD_DIM) + d;
            ks[j][d] = pos <= last ? k_cache[c] : 0.0;
            vs[j][d] = pos <= last ? v_cache[c] : 0.0;
        }
        barrier();
        if (live && k0 <= qpos) {
            float s[BC];
            float tile_max = -1e30;
            for (uint j = 0; j < BC; ++j) {
                float dotv = 0.0;
                for (uint d = 0; d < HEAD_DIM; ++d) {
                    dotv += q[d] * ks[j][d];
                }
                s[j] = k0 + j <= qpos ? dotv : -1e30;
                tile_max = max(tile_max, s[j]);
            }
            float m_new = max(m, tile_max);
            float c = exp(m - m_new);
            l *= c;
            for (uint d = 0; d < HEAD_DIM; ++d) {
                acc[d] *= c;
            }
            for (uint j = 0; j < BC; ++j) {
                if (k0 + j <= qpos) {
                    float e = exp(s[j] - m_new);
                    l += e;
                    for (uint d = 0; d < HEAD_DIM; ++d) {
                        acc[d] += e * vs[j][d];
                    }
                }
            }
            m = m_new;
        }
        barrier();
    }
    if (live) {
        for (uint d = 0; d < HEAD_DIM; ++d) {
            o[t * p.n_head * HEAD_DIM + h * HEAD_DIM + d] = acc[d] / l;
        }
    }
}
