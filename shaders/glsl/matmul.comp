#version 450
// Matrix-matrix product for prefill: C[t, r] = sum_k X[t, k] * W[r, k] (W as stored, [m, k]).
// Compute-bound: 64x64 output tiles, k in steps of 16 through shared memory, each of the 256
// invocations accumulating a 4x4 block in registers. Edges are zero-filled, so any size works.
// With `accumulate` set the product is added to C (a residual add folded into the projection).
#define W_BINDING 0
#include "format.glsl"                                        // W [m, k]

layout(local_size_x = 256) in;
layout(binding = 1) readonly buffer X { float x[]; };         // [n, k]
layout(binding = 2) buffer C { float c[]; };                  // [n, m]
layout(push_constant) uniform Push { uint n; uint m; uint k; uint accumulate; } p;

const uint TILE = 64;
const uint TK = 16;
shared float ws[TK][TILE + 1];   // +1: avoid bank conflicts on the transposed store
shared float xs[TK][TILE + 1];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint row0 = gl_WorkGroupID.x * TILE;    // over m (weights)
    uint tok0 = gl_WorkGroupID.y * TILE;    // over n (tokens)
    uint tr = (tid % 16) * 4;               // this invocation's 4 rows within the tile
    uint tt = (tid / 16) * 4;               // and its 4 tokens

    float acc[4][4];
    for (uint i = 0; i < 4; ++i) {
        for (uint j = 0; j < 4; ++j) {
            acc[i][j] = 0.0;
        }
    }

    for (uint k0 = 0; k0 < p.k; k0 += TK) {
        // Each invocation loads 4 of the 64x16 elements of each tile.
        for (uint e = tid; e < TILE * TK; e += 256) {
            uint rr = e / TK;
            uint kk = e % TK;
            uint gk = k0 + kk;
            uint gr = row0 + rr;
            uint gt = tok0 + rr;
            ws[kk][rr] = (gr < p.m && gk < p.k) ? weight_at(gr * p.k + gk) : 0.0;
            xs[kk][rr] = (gt < p.n && gk < p.k) ? x[gt * p.k + gk] : 0.0;
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
                uint o = t * p.m + r;
                c[o] = p.accumulate != 0u ? c[o] + acc[i][j] : acc[i][j];
            }
        }
    }
}
