#version 450
// Matrix-matrix product for prefill on GPUs: C[t, r] = sum_k X[t, k] * W[r, k] (W as stored,
// [m, k], in the variant's format). Compute-bound: 64x64 output tiles, k in steps of 32
// through shared memory, each of the 256 invocations dequantizing one 8-value chunk of the
// weight tile per step and accumulating a 4x4 block in registers. Token and row edges are
// zero-filled; k must be whole blocks (the host checks). With `accumulate` set the product is
// added to C (a residual add folded into the projection).
// CPU devices run prefill through matvec.comp instead, which suits SIMD lanes better.
#define W_BINDING 0
#include "format.glsl"                                        // W [m, k]

layout(local_size_x = 256) in;
layout(binding = 1) readonly buffer X { vec4 x[]; };          // [n, k]
layout(binding = 2) buffer C { float c[]; };                  // [n, c_width]
// Row r of W lands at c[t, c_first + r].
layout(push_constant) uniform Push {
    uint n;
    uint m;
    uint k;
    uint accumulate;
    uint c_first;
    uint c_width;
} p;

const uint TILE = 64;
const uint TK = 32;
shared float ws[TK][TILE + 1];   // +1: avoid bank conflicts on the transposed store
shared float xs[TK][TILE + 1];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint row0 = gl_WorkGroupID.x * TILE;    // over m (weights)
    uint tok0 = gl_WorkGroupID.y * TILE;    // over n (tokens)
    uint tr = (tid % 16) * 4;               // this invocation's 4 rows within the tile
    uint tt = (tid / 16) * 4;               // and its 4 tokens
    uint lr = tid / 4;                      // the tile row / token this invocation loads
    uint lk = (tid % 4) * 8;                // and its 8 values along k
    const uint per_block = QK / 8;
    uint chunks = p.k / 8;

    float acc[4][4];
    for (uint i = 0; i < 4; ++i) {
        for (uint j = 0; j < 4; ++j) {
            acc[i][j] = 0.0;
        }
    }

    for (uint k0 = 0; k0 < p.k; k0 += TK) {
        uint gk = k0 + lk;
        uint gr = row0 + lr;
        uint gt = tok0 + lr;
        vec4 wlo = vec4(0.0);
        vec4 whi = vec4(0.0);
        if (gr < p.m && gk < p.k) {
            uint chunk = gr * chunks + gk / 8;
            dequant8(chunk / per_block, chunk % per_block, wlo, whi);
        }
        vec4 xlo = vec4(0.0);
        vec4 xhi = vec4(0.0);
        if (gt < p.n && gk < p.k) {
            xlo = x[(gt * p.k + gk) / 4];
            xhi = x[(gt * p.k + gk) / 4 + 1];
        }
        for (uint e = 0; e < 4; ++e) {
            ws[lk + e][lr] = wlo[e];
            ws[lk + 4 + e][lr] = whi[e];
            xs[lk + e][lr] = xlo[e];
            xs[lk + 4 + e][lr] = xhi[e];
        }
        barrier();
        for (uint kk = 0; kk < TK; ++kk) {
            vec4 wv = vec4(ws[kk][tr], ws[kk][tr + 1], ws[kk][tr + 2], ws[kk][tr + 3]);
            vec4 xv = vec4(xs[kk][tt], xs[kk][tt + 1], xs[kk][tt + 2], xs[kk][tt + 3]);
            for (uint j = 0; j < 4; ++j) {
                acc[0][j] += wv.x * xv[j];
                acc[1][j] += wv.y * xv[j];
                acc[2][j] += wv.z * xv[j];
                acc[3][j] += wv.w * xv[j];
            }
        }
        barrier();
    }

    for (uint j = 0; j < 4; ++j) {
        uint t = tok0 + tt + j;
        for (uint i = 0; i < 4; ++i) {
            uint r = row0 + tr + i;
            if (t < p.n && r < p.m) {
                uint o = t * p.c_width + p.c_first + r;
                c[o] = p.accumulate != 0u ? c[o] + acc[i][j] : acc[i][j];
            }
        }
    }
}
