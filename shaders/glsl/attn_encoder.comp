#version 450
// An encoder's attention: full (bidirectional) attention within each text of a batch whose
// texts' tokens are stacked, so a token sees every token of its own text and none of
// another's. q, k and v are read from the fused projection's output, and spans[t] gives the
// rows [first, end) of token t's text.
//
// A workgroup takes WG consecutive rows of one head (one invocation per query) and walks the
// rows from the first of its first query's text to the end of its last query's, in tiles of
// BC rows staged in shared memory; each query scores the rows of its own text only, keeping a
// running max, sum and weighted V (online softmax), so the score matrix is never stored.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint BC = 16;     // key rows per tile
const uint HD4 = HEAD_DIM / 4;

layout(binding = 0) readonly buffer QKV { vec4 qkv[]; };        // [tokens, 3 n_head head_dim]
layout(binding = 1) readonly buffer Spans { uvec2 spans[]; };   // [tokens] (first, end)
layout(binding = 2) writeonly buffer O { vec4 o[]; };           // [tokens, n_head head_dim]
layout(push_constant) uniform Push { uint tokens; uint n_head; float scale; } p;

shared vec4 ks[BC][HD4];
shared vec4 vs[BC][HD4];

void main() {
    uint h = gl_WorkGroupID.y;
    uint tid = gl_LocalInvocationID.x;
    uint first = gl_WorkGroupID.x * WG;
    // vec4s per row of qkv, and where this head's q, k and v start in a row.
    uint stride = 3u * p.n_head * HD4;
    uint q_at = h * HD4;
    uint k_at = (p.n_head + h) * HD4;
    uint v_at = (2u * p.n_head + h) * HD4;
    // Invocations past the last row compute a copy of it and write nothing.
    uint t = min(first + tid, p.tokens - 1u);
    uvec2 span = spans[t];
    // The rows any query of this workgroup sees (texts are stacked in order).
    uint lo = spans[first].x;
    uint hi = spans[min(first + WG, p.tokens) - 1u].y;

    vec4 q[HD4];
    vec4 acc[HD4];
    [[unroll]] for (uint d = 0; d < HD4; ++d) {
        q[d] = qkv[t * stride + q_at + d] * p.scale;
        acc[d] = vec4(0.0);
    }
    float m = -1e30;
    float l = 0.0;

    for (uint k0 = lo; k0 < hi; k0 += BC) {
        // Rows past `hi` repeat the last one; no query sees them.
        for (uint e = tid; e < BC * HD4; e += WG) {
            uint j = e / HD4;
            uint d = e % HD4;
            uint row = min(k0 + j, hi - 1u);
            ks[j][d] = qkv[row * stride + k_at + d];
            vs[j][d] = qkv[row * stride + v_at + d];
        }
        barrier();
        // Dimension-outer loops keep the tile's scores (and one slice of q) in registers.
        float s[BC];
        for (uint j = 0; j < BC; ++j) {
            s[j] = 0.0;
        }
        for (uint d = 0; d < HD4; ++d) {
            for (uint j = 0; j < BC; ++j) {
                s[j] += dot(q[d], ks[j][d]);
            }
        }
        // A tile may hold none of this query's rows; the running max then stays -1e30 and
        // nothing adds.
        float tile_max = -1e30;
        for (uint j = 0; j < BC; ++j) {
            bool seen = k0 + j >= span.x && k0 + j < span.y;
            s[j] = seen ? s[j] : -1e30;
            tile_max = max(tile_max, s[j]);
        }
        float m_new = max(m, tile_max);
        float c = exp(m - m_new);
        l *= c;
        for (uint j = 0; j < BC; ++j) {
            bool seen = k0 + j >= span.x && k0 + j < span.y;
            s[j] = seen ? exp(s[j] - m_new) : 0.0;
            l += s[j];
        }
        m = m_new;
        for (uint d = 0; d < HD4; ++d) {
            vec4 a = acc[d] * c;
            for (uint j = 0; j < BC; ++j) {
                a += s[j] * vs[j][d];
            }
            acc[d] = a;
        }
        // The tile is the next one's.
        barrier();
    }
    if (first + tid < p.tokens) {
        [[unroll]] for (uint d = 0; d < HD4; ++d) {
            o[(t * p.n_head + h) * HD4 + d] = acc[d] / l;
        }
    }
}
