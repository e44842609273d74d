#version 450
// Matrix-matrix product for prefill on GPUs: C[t, r] = sum_k X[t, k] * W[r, k] (W as stored,
// [m, k], in the variant's format). Compute-bound: 64x64 output tiles, k in steps of 32
// through shared memory, each of the 256 invocations dequantizing one 8-value chunk of the
// weight tile per step and accumulating a 4x4 block in registers. Token and row edges are
// zero-filled; k must be whole blocks (the host checks). With `accumulate` set the product is
// added to C (a residual add folded into the projection).
// CPU devices run prefill through matvec.comp instead, which suits SIMD lanes better.
//
// Compiled with EXPERTS, a mixture of experts' product in prefill: W stacks the experts'
// matrices, expert_rows rows each (m is one expert's), and workgroup row y takes tile y of
// moe_route.comp (up to 64 slots of one expert): slot s reads x row s / x_per and writes c row
// s, with the rows of the tile's expert. Each expert's rows are read once per 64 of its slots.
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
    uint expert_rows;   // EXPERTS: rows of W per expert
    uint x_per;         // EXPERTS: slots per row of x
} p;
#ifdef EXPERTS
// (expert, first index into order, slots, 0) per tile; tiles past the last have no slots.
layout(binding = 3) readonly buffer Tiles { uvec4 tiles[]; };
layout(binding = 4) readonly buffer Order { uint order[]; };  // the slots, expert by expert
#endif

const uint TILE = 64;
const uint TK = 32;
shared float ws[TK][TILE + 1];   // +1: avoid bank conflicts on the transposed store
shared float xs[TK][TILE + 1];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint row0 = gl_WorkGroupID.x * TILE;    // over m (weights)
#ifdef EXPERTS
    // The tile's slots stand in for tokens 0 .. count; the expert's rows for W's.
    uvec4 tile = tiles[gl_WorkGroupID.y];
    if (tile.z == 0) {
        return;                             // the whole workgroup: no barrier is skipped
    }
    uint tok0 = 0;
    uint n_tok = tile.z;
    uint w_row0 = tile.x * p.expert_rows;
#else
    uint tok0 = gl_WorkGroupID.y * TILE;    // over n (tokens)
    uint n_tok = p.n;
    uint w_row0 = 0;
#endif
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
            uint chunk = (w_row0 + gr) * chunks + gk / 8;
            dequant8(chunk / per_block, chunk % per_block, wlo, whi);
        }
        vec4 xlo = vec4(0.0);
        vec4 xhi = vec4(0.0);
        if (gt < n_tok && gk < p.k) {
#ifdef EXPERTS
            uint xr = order[tile.y + gt] / p.x_per;
#else
            uint xr = gt;
#endif
            xlo = x[(xr * p.k + gk) / 4];
            xhi = x[(xr * p.k + gk) / 4 + 1];
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
        if (t >= n_tok) {
            break;
        }
#ifdef EXPERTS
        uint out_row = order[tile.y + t];
#else
        uint out_row = t;
#endif
        for (uint i = 0; i < 4; ++i) {
            uint r = row0 + tr + i;
            if (r < p.m) {
                uint o = out_row * p.c_width + p.c_first + r;
                c[o] = p.accumulate != 0u ? c[o] + acc[i][j] : acc[i][j];
            }
        }
    }
}
